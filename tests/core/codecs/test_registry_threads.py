"""The codec registry is complete for every thread from the first lookup on."""

import subprocess
import sys


def test_first_lookups_from_many_threads_all_succeed():
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from zarrfs.core.codecs.sharding import ShardingCodec\n"
        "from zarrfs.core.codecs.base import codec_class\n"
        "names = ['bytes', 'transpose', 'gzip', 'blosc', 'zstd', 'crc32c'] * 8\n"
        "with ThreadPoolExecutor(16) as ex:\n"
        "    print(sorted({c.name for c in ex.map(codec_class, names)}))\n"
    )
    for _ in range(5):  # fresh interpreters: the race only exists before the first load
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "['blosc', 'bytes', 'crc32c', 'gzip', 'transpose', 'zstd']"
