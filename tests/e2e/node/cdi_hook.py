#!/usr/bin/env python3
"""The createContainer hook of tests/e2e/test_node.py's driver CDI spec:
what NVIDIA's nvidia-cdi-hook update-ldcache does for the driver's
libraries, done with the machine's ldconfig.

  cdi_hook.py update-ldcache --folder DIR [--folder DIR ...]

runc runs it in the container's mount namespace before pivot_root, the
container's state (OCI runtime spec, "State") on stdin: the root
filesystem is config.json's root.path in the state's bundle.  ldconfig -r
ROOT DIR... makes the shared-object links (libcuda.so.1 -> the versioned
file the spec mounted) and the container's /etc/ld.so.cache, so the
container's loader finds libcuda.so.1.  Exits non-zero, with the reason
on stderr, when anything fails: runc then fails the container's creation.
"""

import json
import os
import subprocess
import sys


def main():
    args = sys.argv[1:]
    if not args or args[0] != "update-ldcache":
        print("cdi_hook: usage: update-ldcache --folder DIR ...", file=sys.stderr)
        return 2
    folders = []
    rest = args[1:]
    while rest:
        if rest[0] != "--folder" or len(rest) < 2:
            print("cdi_hook: unknown argument %r" % rest[0], file=sys.stderr)
            return 2
        folders.append(rest[1])
        rest = rest[2:]
    state = json.load(sys.stdin)
    bundle = state["bundle"]
    with open(os.path.join(bundle, "config.json")) as f:
        root = json.load(f)["root"]["path"]
    if not os.path.isabs(root):
        root = os.path.join(bundle, root)
    ldconfig = next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                     if os.access(p, os.X_OK)), None)
    if not ldconfig:
        print("cdi_hook: no ldconfig on this machine", file=sys.stderr)
        return 1
    r = subprocess.run([ldconfig, "-r", root] + folders, capture_output=True,
                       text=True)
    if r.returncode != 0:
        print("cdi_hook: ldconfig -r %s %s: %s" % (root, " ".join(folders),
                                                   r.stderr.strip()),
              file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
