#!/usr/bin/python3
"""gpufrac's OCI images (scripts/build-images): built twice, byte-identical;
each image's layout is consistent (every blob's digest is its content's),
its config (entrypoint, cmd, user, labels) as intended, read from the layout
JSON and by two other readers (umoci stat, skopeo inspect); its root
filesystem unpacked (umoci unpack --rootless) holds only files owned by 0:0
with the fixed mtime, and its binary runs from there with the image's own
ld.so and libraries (no chroot, no library of this machine loaded).

Usage: test_images.py GPUFRAC INTERPOSER VERSION   Prints 'N passed, N failed'.
"""
import filecmp
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, "scripts", "build-images")
MULTIARCH = "usr/lib/x86_64-linux-gnu"
LDSO = "usr/lib64/ld-linux-x86-64.so.2"
# name -> (Cmd, User)
IMAGES = {"gpufrac-node": ("node", "0:0"),
          "gpufrac-scheduler": ("scheduler", "65532:65532"),
          "gpufrac-plan": ("plan", "65532:65532")}
# One fixed time, so that the check of the layer's mtimes cannot pass by
# accident (the last commit's time is the default; both builds use this).
EPOCH = 1764547200  # 2025-12-01T00:00:00Z

passed = failed = 0


def check(cond, what):
    global passed, failed
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    passed += bool(cond)
    failed += not cond
    return cond


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)


def tree(d):
    out = []
    for base, dirs, files in os.walk(d):
        dirs.sort()
        for f in sorted(files):
            out.append(os.path.relpath(os.path.join(base, f), d))
    return out


def blob(layout, digest):
    algo, hexd = digest.split(":", 1)
    with open(os.path.join(layout, "blobs", algo, hexd), "rb") as f:
        return f.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def in_rootfs(rootfs, *args):
    """argv that runs the image's gpufrac with the image's ld.so and only
    the image's libraries (no ld.so.cache of this machine)."""
    return [os.path.join(rootfs, LDSO), "--inhibit-cache", "--library-path",
            os.path.join(rootfs, MULTIARCH)] + list(args)


def check_layout(name, layout, version, cmd, user):
    with open(os.path.join(layout, "oci-layout")) as f:
        check(json.load(f).get("imageLayoutVersion") == "1.0.0", "%s: an OCI layout 1.0.0" % name)
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    refs = [m for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == version]
    if not check(len(index["manifests"]) == 1 and len(refs) == 1,
                 "%s: one manifest, tagged %s" % (name, version)):
        return None
    # Every blob is what its name says.
    bad = []
    for algo in os.listdir(os.path.join(layout, "blobs")):
        for h in os.listdir(os.path.join(layout, "blobs", algo)):
            if hashlib.new(algo, blob(layout, algo + ":" + h)).hexdigest() != h:
                bad.append(h)
    check(not bad, "%s: every blob's sha256 is its name (%s)" % (name, bad or "all"))
    manifest = json.loads(blob(layout, refs[0]["digest"]))
    check(len(blob(layout, refs[0]["digest"])) == refs[0]["size"], "%s: manifest size" % name)
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    c = config.get("config", {})
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH))
    check(c.get("Entrypoint") == ["/usr/bin/gpufrac"] and c.get("Cmd") == [cmd],
          "%s: entrypoint /usr/bin/gpufrac, cmd %s" % (name, cmd))
    check(c.get("User") == user, "%s: user %s (got %s)" % (name, user, c.get("User")))
    check(c.get("Env") == ["PATH=/usr/bin"] and c.get("WorkingDir") == "/",
          "%s: PATH=/usr/bin, working directory /" % name)
    labels = c.get("Labels", {})
    want = {"org.opencontainers.image.title": name,
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.created": created}
    check(all(labels.get(k) == v for k, v in want.items()) and
          len(labels.get("org.opencontainers.image.revision", "")) == 40 and
          labels.get("org.opencontainers.image.description"),
          "%s: labels org.opencontainers.image.title, version, created, revision, "
          "description (%s)" % (name, labels))
    check(config.get("created") == created and
          all(h.get("created") == created for h in config.get("history", [])),
          "%s: the config's and history's times are SOURCE_DATE_EPOCH (%s)" % (name, created))
    check(config.get("os") == "linux" and config.get("architecture") == "amd64",
          "%s: linux/amd64" % name)
    check(len(manifest["layers"]) == 1 and
          manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip",
          "%s: one gzip layer" % name)
    # Two other readers agree with the JSON.
    r = run(["umoci", "stat", "--json", "--image", "%s:%s" % (layout, version)])
    st = json.loads(r.stdout) if r.returncode == 0 else {}
    check([h.get("created_by") for h in st.get("history", [])] ==
          ["scripts/build-images: %s root filesystem" % name,
           "scripts/build-images: %s config" % name], "%s: umoci stat reads its history" % name)
    r = run(["skopeo", "inspect", "--config", "oci:%s:%s" % (layout, version)])
    check(r.returncode == 0 and json.loads(r.stdout) == config,
          "%s: skopeo inspect --config reads the same config%s" %
          (name, "" if r.returncode == 0 else ": " + r.stderr.strip()))
    # The layer: owners 0:0, mtimes SOURCE_DATE_EPOCH, in order.
    with tarfile.open(fileobj=__import__("io").BytesIO(
            blob(layout, manifest["layers"][0]["digest"]))) as t:
        members = t.getmembers()
    odd = [m.name for m in members if m.uid or m.gid or int(m.mtime) != EPOCH]
    check(members and not odd, "%s: %d files in the layer, all 0:0 with mtime %d%s" %
          (name, len(members), EPOCH, (" (not: %s)" % odd[:5]) if odd else ""))
    return config


def check_rootfs(name, rootfs, version, cmd, user, interposer):
    gf = os.path.join(rootfs, "usr/bin/gpufrac")
    r = run(in_rootfs(rootfs, "--list", gf))
    loaded = [ln.split("=>")[1].split("(")[0].strip() for ln in r.stdout.splitlines()
              if "=>" in ln]
    outside = [p for p in loaded if not p.startswith(rootfs + "/")]
    check(r.returncode == 0 and loaded and not outside,
          "%s: gpufrac's %d libraries all load from the image%s" %
          (name, len(loaded), (" (not: %s)" % outside) if outside else
           ("" if r.returncode == 0 else ": " + r.stderr.strip())))
    r = run(in_rootfs(rootfs, gf, "version"))
    check(r.returncode == 0 and r.stdout.strip() == "gpufrac " + version,
          "%s: gpufrac version from the image: %r" % (name, r.stdout.strip() or r.stderr.strip()))
    r = run(in_rootfs(rootfs, gf, cmd, "--help"))
    check(r.returncode == 0 and r.stdout.startswith("usage: gpufrac " + cmd),
          "%s: gpufrac %s --help from the image" % (name, cmd))
    uid = user.split(":")[0]
    with open(os.path.join(rootfs, "etc/passwd")) as f:
        users = {ln.split(":")[2]: ln.split(":")[0] for ln in f if ln.count(":") >= 6}
    check(uid in users, "%s: /etc/passwd names uid %s (%s)" % (name, uid, users.get(uid)))
    with open(os.path.join(rootfs, "usr/share/doc/gpufrac/debian-packages")) as f:
        pkgs = [ln.split()[0].split(":")[0] for ln in f if ln.strip()]
    nocopy = [p for p in pkgs if not os.path.isfile(
        os.path.join(rootfs, "usr/share/doc", p, "copyright"))]
    check(pkgs and "libc6" in pkgs and not nocopy,
          "%s: each of its %d Debian packages' copyright is in the image%s" %
          (name, len(pkgs), (" (not: %s)" % nocopy) if nocopy else ""))
    shim = os.path.join(rootfs, "usr/lib/gpufrac/libgpufrac-cuda.so")
    if name == "gpufrac-node":
        check(os.path.isfile(shim) and filecmp.cmp(shim, interposer, shallow=False),
              "%s: the interposer at /usr/lib/gpufrac/libgpufrac-cuda.so" % name)
        r = run(in_rootfs(rootfs, "--list", shim))
        outside = [ln for ln in r.stdout.splitlines() if "=>" in ln and rootfs not in ln]
        check(r.returncode == 0 and not outside,
              "%s: the interposer's libraries are in the image" % name)
        tmp = tempfile.mkdtemp(prefix="gpufrac-img-node-")
        try:
            r = run(in_rootfs(rootfs, gf, "node", "--fake-gpus", "2xA100-40GB", "--no-kube",
                              "--once", "--print", "inventory", "--state-dir", tmp,
                              "--cdi-dir", tmp))
            inv = json.loads(r.stdout) if r.returncode == 0 else {}
            check(len(inv.get("gpus", [])) == 2,
                  "%s: the node agent from the image prints a 2-GPU inventory%s" %
                  (name, "" if r.returncode == 0 else ": " + r.stderr.strip()))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        check(not os.path.exists(shim), "%s: no interposer" % name)
    if name == "gpufrac-scheduler":
        port = free_port()
        p = subprocess.Popen(in_rootfs(rootfs, gf, "scheduler", "--no-kube", "--listen",
                                       "127.0.0.1:%d" % port),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            code = None
            for _ in range(100):
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port,
                                                timeout=2) as resp:
                        code = resp.status
                        break
                except OSError:
                    time.sleep(0.1)
            check(code == 200, "%s: the extender from the image answers /healthz" % name)
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
        check(rc == 0, "%s: the extender stops with 0 on SIGTERM (got %s)" % (name, rc))


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    gpufrac, interposer, version = sys.argv[1:]
    work = tempfile.mkdtemp(prefix="gpufrac-images-")
    try:
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH))
        outs = []
        for n in ("a", "b"):
            out = os.path.join(work, n)
            r = run([BUILD, "--gpufrac", gpufrac, "--interposer", interposer,
                     "--version", version, "--out", out], env=env)
            check(r.returncode == 0, "build %s: scripts/build-images%s" %
                  (n, "" if r.returncode == 0 else ": " + (r.stderr or r.stdout).strip()))
            outs.append(out)
        ta, tb = tree(outs[0]), tree(outs[1])
        same = ta == tb and all(filecmp.cmp(os.path.join(outs[0], f), os.path.join(outs[1], f),
                                            shallow=False) for f in ta)
        check(ta and same, "two builds are byte-identical (%d files)" % len(ta))
        check(sorted(os.listdir(outs[0])) == sorted(IMAGES),
              "the layouts: %s" % ", ".join(sorted(IMAGES)))
        for name, (cmd, user) in sorted(IMAGES.items()):
            layout = os.path.join(outs[0], name)
            if not check(os.path.isdir(layout), "%s: a layout" % name):
                continue
            check_layout(name, layout, version, cmd, user)
            bundle = os.path.join(work, "unpack-" + name)
            r = run(["umoci", "unpack", "--rootless", "--image", "%s:%s" % (layout, version),
                     bundle])
            if check(r.returncode == 0, "%s: umoci unpack --rootless%s" %
                     (name, "" if r.returncode == 0 else ": " + r.stderr.strip())):
                check_rootfs(name, os.path.join(bundle, "rootfs"), version, cmd, user,
                             interposer)
        # Another time, another image: SOURCE_DATE_EPOCH is what decides.
        out = os.path.join(work, "c")
        r = run([BUILD, "--gpufrac", gpufrac, "--interposer", interposer, "--version", version,
                 "--out", out, "--only", "gpufrac-plan"],
                env=dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH + 1)))
        check(r.returncode == 0 and tree(os.path.join(out, "gpufrac-plan")) !=
              tree(os.path.join(outs[0], "gpufrac-plan")),
              "a different SOURCE_DATE_EPOCH gives different blobs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
