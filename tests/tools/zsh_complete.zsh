# zsh -f zsh_complete.zsh WORDS FPATH_DIR: type WORDS and TAB into an interactive zsh (on a
# pseudo-terminal, through zsh/zpty) whose fpath starts with FPATH_DIR, and print what the
# terminal shows afterwards (the completed line, or the list of candidates)
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PS1='>'; unsetopt zle_bracketed_paste 2>/dev/null; bindkey -e"
zpty -w z "fpath=($2 \$fpath); autoload -U compinit; compinit -u -D; print START"
sleep 0.5
zpty -n -w z "$1"
sleep 0.3
zpty -n -w z $'\t'
local out all
for i in {1..30}; do
    sleep 0.1
    while zpty -r -t z out 2>/dev/null; do all+=$out; done
done
zpty -d z
print -r -- ${all#*START}
