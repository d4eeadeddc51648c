#!/usr/bin/python3
"""gpufrac's OCI images (scripts/build-images), amd64 and arm64: built
twice, byte-identical; each layout's tag is an OCI image index with one
manifest per platform (its platform fields, its config's architecture),
every blob's digest is its content's and every blob is referenced; `skopeo
copy --all` (the push) carries the index and both images; each platform's
image, pulled from the index by skopeo as a registry client would
(--override-arch), has its config (entrypoint, cmd, user, labels) as
intended, read from the layout JSON and by two other readers (umoci stat,
skopeo inspect); its root filesystem unpacked (umoci unpack --rootless)
holds only files owned by 0:0 with the fixed mtime, the binaries' ELF
machine is the platform's and their interpreter is in the image, and the
binary runs from there with the image's own ld.so and libraries (no chroot,
no library of this machine loaded; arm64 under qemu-aarch64-static), and a
program of that architecture loads the image's interposer and calls cuInit.

Usage: test_images.py GPUFRAC INTERPOSER VERSION GPUFRAC_ARM64 INTERPOSER_ARM64
Prints 'N passed, N failed'.
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
# arch -> (multiarch directory, the ld.so file, the program interpreter
# the binaries name, readelf's machine, the C compiler, the emulator)
ARCHES = {
    "amd64": ("usr/lib/x86_64-linux-gnu", "usr/lib64/ld-linux-x86-64.so.2",
              "/lib64/ld-linux-x86-64.so.2", "Advanced Micro Devices X86-64", "gcc", []),
    "arm64": ("usr/lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
              "/lib/ld-linux-aarch64.so.1", "AArch64", "aarch64-linux-gnu-gcc",
              ["qemu-aarch64-static"]),
}
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
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


def in_rootfs(rootfs, arch, *args):
    """argv that runs the image's gpufrac with the image's ld.so and only
    the image's libraries (no ld.so.cache of this machine), under the
    architecture's emulator where it is not this machine's."""
    multiarch, ldso = ARCHES[arch][0], ARCHES[arch][1]
    return ARCHES[arch][5] + [os.path.join(rootfs, ldso), "--inhibit-cache", "--library-path",
                              os.path.join(rootfs, multiarch)] + list(args)


def resolve_in(rootfs, path):
    """path as the image's root filesystem resolves it (its symbolic links,
    absolute ones inside rootfs), or None when it is not there."""
    parts, seen = [p for p in path.split("/") if p], 0
    cur = ""
    while parts:
        p = parts.pop(0)
        nxt = cur + "/" + p
        full = rootfs + nxt
        if os.path.islink(full):
            seen += 1
            if seen > 40:
                return None
            t = os.readlink(full)
            parts = [x for x in t.split("/") if x] + parts
            if t.startswith("/"):
                cur = ""
            continue
        if p == "..":
            cur = cur.rsplit("/", 1)[0]
            continue
        if not os.path.exists(full):
            return None
        cur = nxt
    return rootfs + cur


def check_blobs(name, layout):
    """Every blob is what its name says; returns their digests."""
    bad, digests = [], set()
    for algo in os.listdir(os.path.join(layout, "blobs")):
        for h in os.listdir(os.path.join(layout, "blobs", algo)):
            digests.add(algo + ":" + h)
            if hashlib.new(algo, blob(layout, algo + ":" + h)).hexdigest() != h:
                bad.append(h)
    check(not bad, "%s: every blob's sha256 is its name (%s)" % (name, bad or "all"))
    return digests


def check_index(name, layout, version):
    """The layout's tag: an image index of one manifest per platform of
    ARCHES.  Returns {arch: manifest digest}, or None."""
    with open(os.path.join(layout, "oci-layout")) as f:
        check(json.load(f).get("imageLayoutVersion") == "1.0.0", "%s: an OCI layout 1.0.0" % name)
    with open(os.path.join(layout, "index.json")) as f:
        top = json.load(f)
    refs = [m for m in top["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == version]
    if not check(len(top["manifests"]) == 1 and len(refs) == 1 and
                 refs[0].get("mediaType") == INDEX,
                 "%s: index.json names one image index, tagged %s" % (name, version)):
        return None
    digests = check_blobs(name, layout)
    raw = blob(layout, refs[0]["digest"])
    idx = json.loads(raw)
    check(len(raw) == refs[0]["size"] and idx.get("schemaVersion") == 2 and
          idx.get("mediaType") == INDEX, "%s: the image index (size, schemaVersion 2, "
          "mediaType)" % name)
    plats = sorted(m.get("platform", {}).get("architecture", "") for m in idx["manifests"])
    if not check(plats == sorted(ARCHES) and len(idx["manifests"]) == len(ARCHES),
                 "%s: the index names one manifest per platform: %s" % (name, plats)):
        return None
    out, used = {}, {refs[0]["digest"]}
    for m in idx["manifests"]:
        arch = m["platform"]["architecture"]
        raw = blob(layout, m["digest"])
        man = json.loads(raw)
        config = json.loads(blob(layout, man["config"]["digest"]))
        check(m.get("mediaType") == MANIFEST and len(raw) == m["size"] and
              m["platform"] == {"architecture": arch, "os": "linux"},
              "%s: %s's entry: an image manifest, its size, platform linux/%s" %
              (name, arch, arch))
        check(config.get("architecture") == arch and config.get("os") == "linux",
              "%s: %s's config says linux/%s (%s/%s)" % (name, arch, arch, config.get("os"),
                                                       config.get("architecture")))
        used |= {m["digest"], man["config"]["digest"]} | {x["digest"] for x in man["layers"]}
        out[arch] = m["digest"]
    check(digests == used, "%s: every blob belongs to the index (%d blobs%s)" %
          (name, len(digests), "; not: %s" % sorted(digests - used) if digests - used else ""))
    return out


def check_layout(name, layout, version, cmd, user, arch):
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    refs = [m for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == version]
    if not check(len(index["manifests"]) == 1 and len(refs) == 1,
                 "%s: one manifest, tagged %s" % (name, version)):
        return None
    check_blobs(name, layout)
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
    image = name.split(" (")[0]  # "gpufrac-node (arm64)"
    want = {"org.opencontainers.image.title": image,
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
    check(config.get("os") == "linux" and config.get("architecture") == arch,
          "%s: linux/%s" % (name, arch))
    check(len(manifest["layers"]) == 1 and
          manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip",
          "%s: one gzip layer" % name)
    # Two other readers agree with the JSON.
    r = run(["umoci", "stat", "--json", "--image", "%s:%s" % (layout, version)])
    st = json.loads(r.stdout) if r.returncode == 0 else {}
    check([h.get("created_by") for h in st.get("history", [])] ==
          ["scripts/build-images: %s root filesystem" % image,
           "scripts/build-images: %s config" % image], "%s: umoci stat reads its history" % name)
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


def elf(path):
    """(readelf's machine, the program interpreter or "") of an ELF file."""
    h = run(["readelf", "-h", "-l", path]).stdout
    machine = interp = ""
    for ln in h.splitlines():
        if ln.strip().startswith("Machine:"):
            machine = ln.split(":", 1)[1].strip()
        if "Requesting program interpreter:" in ln:
            interp = ln.split(":", 1)[1].strip().rstrip("]").strip()
    return machine, interp


def check_rootfs(name, rootfs, version, cmd, user, interposer, arch):
    gf = os.path.join(rootfs, "usr/bin/gpufrac")
    machine, interp = elf(gf)
    check(machine == ARCHES[arch][3] and interp == ARCHES[arch][2],
          "%s: gpufrac is %s's (%s), its interpreter %s" % (name, arch, machine, interp))
    at = resolve_in(rootfs, interp) if interp else None
    check(at and os.path.isfile(at) and os.path.samefile(at, os.path.join(rootfs, ARCHES[arch][1]))
          and elf(at)[0] == ARCHES[arch][3],
          "%s: the interpreter %s is in the image (%s)" % (name, interp, at and at[len(rootfs):]))
    r = run(in_rootfs(rootfs, arch, "--list", gf))
    loaded = [ln.split("=>")[1].split("(")[0].strip() for ln in r.stdout.splitlines()
              if "=>" in ln]
    outside = [p for p in loaded if not p.startswith(rootfs + "/")]
    check(r.returncode == 0 and loaded and not outside,
          "%s: gpufrac's %d libraries all load from the image%s" %
          (name, len(loaded), (" (not: %s)" % outside) if outside else
           ("" if r.returncode == 0 else ": " + r.stderr.strip())))
    for v in ("version", "--version"):
        r = run(in_rootfs(rootfs, arch, gf, v))
        check(r.returncode == 0 and r.stdout.strip() == "gpufrac " + version,
              "%s: gpufrac %s from the image: %r" % (name, v, r.stdout.strip() or r.stderr.strip()))
    r = run(in_rootfs(rootfs, arch, gf, cmd, "--help"))
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
    image = name.split(" (")[0]  # "gpufrac-node (arm64)"
    if image == "gpufrac-node":
        check(os.path.isfile(shim) and filecmp.cmp(shim, interposer, shallow=False),
              "%s: the interposer at /usr/lib/gpufrac/libgpufrac-cuda.so" % name)
        check(elf(shim)[0] == ARCHES[arch][3], "%s: the interposer is %s's" % (name, arch))
        r = run(in_rootfs(rootfs, arch, "--list", shim))
        outside = [ln for ln in r.stdout.splitlines() if "=>" in ln and rootfs not in ln]
        check(r.returncode == 0 and not outside,
              "%s: the interposer's libraries are in the image%s" %
              (name, (" (not: %s)" % outside) if outside else ""))
        # A program of this architecture loads it and calls cuInit: no
        # driver in the image, so CUDA_ERROR_NOT_INITIALIZED (3).
        tmp = tempfile.mkdtemp(prefix="gpufrac-img-probe-")
        try:
            probe = os.path.join(tmp, "load_interposer")
            r = run([ARCHES[arch][4], "-std=c11", "-Wall", "-Werror", "-o", probe,
                     os.path.join(HERE, "load_interposer.c"), "-ldl"])
            if check(r.returncode == 0, "%s: load_interposer built with %s%s" %
                     (name, ARCHES[arch][4], "" if r.returncode == 0 else ": " + r.stderr)):
                r = run(in_rootfs(rootfs, arch, probe, shim))
                check(r.returncode == 0 and r.stdout.strip() == "cuInit 3",
                      "%s: an %s program loads the image's interposer, its cuInit answers 3 "
                      "without a driver (%r)" % (name, arch, (r.stdout + r.stderr).strip()))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        tmp = tempfile.mkdtemp(prefix="gpufrac-img-node-")
        try:
            r = run(in_rootfs(rootfs, arch, gf, "node", "--fake-gpus", "2xA100-40GB", "--no-kube",
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
    if image == "gpufrac-scheduler":
        port = free_port()
        p = subprocess.Popen(in_rootfs(rootfs, arch, gf, "scheduler", "--no-kube", "--listen",
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
    if image == "gpufrac-plan":
        # `gpufrac plan --example` (NOTES.txt, docs/plan.md) reads the bundled
        # example from /usr/share/gpufrac, where gpufrac looks in an install
        # (src/cli/data_dir.c; run through the image's ld.so here,
        # /proc/self/exe is the loader, so the directory is named).
        data = os.path.join(rootfs, "usr/share/gpufrac")
        r = run(in_rootfs(rootfs, arch, gf, "plan", "--example"),
                env=dict(os.environ, GPUFRAC_DATA=data))
        check(r.returncode == 0 and r.stdout.startswith("gpufrac plan: "),
              "%s: gpufrac plan --example from the image's /usr/share/gpufrac%s" %
              (name, "" if r.returncode == 0 else ": " + r.stderr.strip()))


def pulled(name, layout, version, arch, work):
    """The image skopeo takes from the index for linux/ARCH, copied into a
    layout of its own; (that layout, the manifest digest it took) or None."""
    one = os.path.join(work, "%s-%s" % (name, arch))
    r = run(["skopeo", "copy", "--override-os", "linux", "--override-arch", arch,
             "oci:%s:%s" % (layout, version), "oci:%s:%s" % (one, version)])
    if not check(r.returncode == 0, "%s: skopeo copy --override-arch %s from the index%s" %
                 (name, arch, "" if r.returncode == 0 else ": " + r.stderr.strip())):
        return None
    with open(os.path.join(one, "index.json")) as f:
        return one, json.load(f)["manifests"][0]["digest"]


def check_push(name, layout, version, work):
    """What the install's push does (skopeo copy --all) carries the index
    and every platform's image, unchanged."""
    dst = os.path.join(work, "pushed-" + name)
    r = run(["skopeo", "copy", "--all", "oci:%s:%s" % (layout, version),
             "oci:%s:%s" % (dst, version)])
    if not check(r.returncode == 0, "%s: skopeo copy --all%s" %
                 (name, "" if r.returncode == 0 else ": " + r.stderr.strip())):
        return
    with open(os.path.join(layout, "index.json")) as f:
        want = json.load(f)["manifests"][0]["digest"]
    with open(os.path.join(dst, "index.json")) as f:
        got = json.load(f)["manifests"][0]["digest"]
    check(got == want and set(tree(os.path.join(dst, "blobs"))) ==
          set(tree(os.path.join(layout, "blobs"))),
          "%s: skopeo copy --all carries the index %s and every platform's blobs" %
          (name, want[:19]))


def build(args, out, epoch, *more):
    """scripts/build-images with the four binaries into out."""
    gpufrac, interposer, version, gpufrac_arm64, interposer_arm64 = args
    return run([BUILD, "--gpufrac", gpufrac, "--interposer", interposer,
                "--gpufrac-arm64", gpufrac_arm64, "--interposer-arm64", interposer_arm64,
                "--version", version, "--out", out] + list(more),
               env=dict(os.environ, SOURCE_DATE_EPOCH=str(epoch)))


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    args = sys.argv[1:]
    interposers = {"amd64": args[1], "arm64": args[4]}
    version = args[2]
    work = tempfile.mkdtemp(prefix="gpufrac-images-")
    try:
        outs = []
        for n in ("a", "b"):
            out = os.path.join(work, n)
            r = build(args, out, EPOCH)
            check(r.returncode == 0, "build %s: scripts/build-images%s" %
                  (n, "" if r.returncode == 0 else ": " + (r.stderr or r.stdout).strip()))
            outs.append(out)
        ta, tb = tree(outs[0]), tree(outs[1])
        differ = sorted(set(ta) ^ set(tb)) + [
            f for f in ta if f in tb and not filecmp.cmp(
                os.path.join(outs[0], f), os.path.join(outs[1], f), shallow=False)]
        # (A commit between the two builds changes the revision label.)
        check(ta and not differ, "two builds are byte-identical (%d files)%s" %
              (len(ta), " (not: %s)" % differ[:6] if differ else ""))
        check(sorted(os.listdir(outs[0])) == sorted(IMAGES),
              "the layouts: %s" % ", ".join(sorted(IMAGES)))
        for name, (cmd, user) in sorted(IMAGES.items()):
            layout = os.path.join(outs[0], name)
            if not check(os.path.isdir(layout), "%s: a layout" % name):
                continue
            entries = check_index(name, layout, version)
            if entries is None:
                continue
            check_push(name, layout, version, work)
            for arch in sorted(ARCHES):
                one = pulled(name, layout, version, arch, work)
                if not one:
                    continue
                what = "%s (%s)" % (name, arch)
                check(one[1] == entries[arch], "%s: skopeo took the index's %s manifest" %
                      (what, arch))
                check_layout(what, one[0], version, cmd, user, arch)
                bundle = os.path.join(work, "unpack-%s-%s" % (name, arch))
                r = run(["umoci", "unpack", "--rootless", "--image",
                         "%s:%s" % (one[0], version), bundle])
                if check(r.returncode == 0, "%s: umoci unpack --rootless%s" %
                         (what, "" if r.returncode == 0 else ": " + r.stderr.strip())):
                    check_rootfs(what, os.path.join(bundle, "rootfs"), version, cmd, user,
                                 interposers[arch], arch)
        # Another time, another image: SOURCE_DATE_EPOCH is what decides.
        out = os.path.join(work, "c")
        r = build(args, out, EPOCH + 1, "--only", "gpufrac-plan")
        check(r.returncode == 0 and tree(os.path.join(out, "gpufrac-plan")) !=
              tree(os.path.join(outs[0], "gpufrac-plan")),
              "a different SOURCE_DATE_EPOCH gives different blobs")
        # An amd64 binary given as arm64's is refused before anything is built.
        bad = list(args)
        bad[3] = args[0]
        r = build(bad, os.path.join(work, "d"), EPOCH, "--only", "gpufrac-plan")
        check(r.returncode != 0 and "not arm64's (AArch64)" in r.stderr and
              not os.path.exists(os.path.join(work, "d", "gpufrac-plan")),
              "an amd64 gpufrac as --gpufrac-arm64 is refused: %r" % r.stderr.strip())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
