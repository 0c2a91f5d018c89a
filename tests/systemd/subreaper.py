"""Run commands as a child subreaper, so a daemon they leave behind becomes our child and its
exit status can be read.

``mount -t fuse.zarrfs`` runs mount.fuse3, which runs ``zarrfs STORE MNT -o ...``, which starts
the daemon and exits once the mount is live: the daemon is orphaned, and the kernel hands it to
the nearest ancestor marked ``PR_SET_CHILD_SUBREAPER`` (this process) instead of PID 1.

Protocol: one JSON request per line on stdin, one JSON answer per line on stdout.

    {"run": [ARGV...], "env": {...}}   ->  {"rc": N, "stdout": "...", "stderr": "..."}
    {"wait": PID, "timeout": SECONDS}  ->  {"exit": N} | {"signal": N} | {"timeout": true}

At end of input it reaps what has already exited and leaves.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def wait(pid: int, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return {"error": f"{pid} is not a child of the subreaper"}
        if done:
            if os.WIFSIGNALED(status):
                return {"signal": os.WTERMSIG(status)}
            return {"exit": os.WEXITSTATUS(status)}
        if time.monotonic() > deadline:
            return {"timeout": True}
        time.sleep(0.05)


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"subreaper: prctl: {os.strerror(ctypes.get_errno())}")
    for line in sys.stdin:
        request = json.loads(line)
        if "run" in request:
            result = subprocess.run(
                request["run"], env=request.get("env"), capture_output=True, text=True,
                stdin=subprocess.DEVNULL, timeout=request.get("timeout", 120),
            )  # fmt: skip
            answer: dict[str, object] = {
                "rc": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
            }  # fmt: skip
        else:
            answer = wait(int(request["wait"]), float(request.get("timeout", 30)))
        print(json.dumps(answer), flush=True)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


if __name__ == "__main__":
    main()
