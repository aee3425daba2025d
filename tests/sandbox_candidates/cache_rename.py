"""Does what Triton's and Inductor's caches do on a cold start: write into a temporary folder inside the cache,
then rename the file up into the cache. The sandbox must allow it (a refused rename fails every GPU kernel)."""
import os
import tempfile
import uuid


def kernel_fn(x):
    for cache in (os.environ["TRITON_CACHE_DIR"], tempfile.gettempdir()):
        key = os.path.join(cache, f"ak-test-{uuid.uuid4().hex}")
        tmp = os.path.join(key, f"tmp.pid_{os.getpid()}")
        os.makedirs(tmp)
        with open(os.path.join(tmp, "kernel.so"), "w") as f:
            f.write("built")
        os.replace(os.path.join(tmp, "kernel.so"), os.path.join(key, "kernel.so"))
    raise RuntimeError("renamed up into both caches")
