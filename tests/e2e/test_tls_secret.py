#!/usr/bin/env python3
"""The extender's HTTPS as deploy/ ships it (CTest label e2e; issue 29 §3).

usage: test_tls_secret.py HELM GPUFRAC

For each way deploy/ describes the TLS setup, deploy/scheduler.yaml with
its TLS lines uncommented as its comments say, and the Helm chart rendered
by `helm template` with extender.tls.enabled, this test takes the
extender's pod spec as written and reproduces what the kubelet and the
container runtime would make of it on a node:

  - the Secret volume: its keys (tls.crt, tls.key, client-ca.crt) written
    under the mount path the way the kubelet's atomic writer lays them out
    (..data -> a timestamped directory, each key a symlink into ..data),
    each file with the volume's defaultMode, owned by root; with the pod's
    fsGroup, group-owned by it and its mode OR 0440 (a Secret volume is
    read-only to the kubelet's ownership change), the directories
    setgid and group-executable;
  - the process: the container's args (its paths remapped into the test's
    directory), run as the pod's runAsUser and runAsGroup with the fsGroup
    as a supplementary group, as a container runtime starts it.

Then a client as kube-scheduler is set up (curl with a client certificate
marked clientAuth, of the Secret's CA) must get 200 from /filter, and one
with a certificate marked for server use only must get 403.  The harness
runs as root to do the chown and setuid; that is a precondition, not a
skip.  No kubelet runs here (none can mount volumes in this harness): the
modes above are the kubelet's rules written down, with the manifests' own
values.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import yaml

HELM = GPUFRAC = None  # main() sets them
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DEPLOY = os.path.join(ROOT, "deploy")


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def extender_deployment(docs):
    for d in docs:
        if d and d.get("kind") == "Deployment" and \
                d["metadata"]["name"] == "gpufrac-scheduler":
            return d
    fail("no Deployment gpufrac-scheduler")


def from_manifest():
    """deploy/scheduler.yaml with the TLS lines uncommented as its own
    comments tell the reader to."""
    with open(os.path.join(DEPLOY, "scheduler.yaml")) as f:
        text = f.read()
    out, seen = [], set()
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^\s*# (volumeMounts:|volumes:)\s*$", line)
        if m:
            out.append(line.replace("# ", "", 1))
            seen.add(m.group(1))
            continue
        if re.match(r"^\s*#\s+(- \{?name: tls\b|secret: )", line):
            out.append(line.replace("# ", "", 1))
            seen.add("tls")
            continue
        out.append(line)
    d = extender_deployment(yaml.safe_load_all("\n".join(out)))
    c = d["spec"]["template"]["spec"]["containers"][0]
    # the TLS arguments, as the comment lists them
    args = re.findall(r'#\s+"(--tls-[a-z-]+)", "([^"]+)"', text)
    if seen != {"volumeMounts:", "volumes:", "tls"} or len(args) != 3:
        fail("deploy/scheduler.yaml: its commented TLS volume, mount and "
             "arguments were not found (%s, %s)" % (sorted(seen), args))
    for flag, val in args:
        c["args"] += [flag, val]
    return d


def from_chart():
    r = subprocess.run([HELM, "template", "g", os.path.join(DEPLOY, "helm",
                                                            "gpufrac"),
                        "--namespace", "gpufrac-system",
                        "--set", "extender.tls.enabled=true"],
                       capture_output=True, text=True)
    if r.returncode:
        fail("helm template: " + r.stderr)
    return extender_deployment(yaml.safe_load_all(r.stdout))


def openssl(d, *a):
    subprocess.run(["openssl"] + list(a), check=True, cwd=d,
                   capture_output=True)


def make_certs(d):
    openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "2", "-subj", "/CN=e2e-extender-ca")
    for who, eku in (("tls", "serverAuth"), ("client", "clientAuth"),
                     ("serveronly", "serverAuth")):
        with open(os.path.join(d, who + ".ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                    "extendedKeyUsage=%s\n" % eku)
        openssl(d, "req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                who + ".key", "-out", who + ".csr", "-subj", "/CN=" + who)
        openssl(d, "x509", "-req", "-in", who + ".csr", "-CA", "ca.crt",
                "-CAkey", "ca.key", "-CAcreateserial", "-out", who + ".crt",
                "-days", "2", "-extfile", who + ".ext")


def kubelet_secret_volume(target, data, default_mode, fs_group):
    """Lays out a Secret volume at target as the kubelet does (see the
    module's docstring)."""
    os.makedirs(target)
    ts = os.path.join(target, "..2026_01_01_00_00_00.000000001")
    os.makedirs(ts)
    for key, src in data.items():
        dst = os.path.join(ts, key)
        shutil.copyfile(src, dst)
        os.chown(dst, 0, 0)
        os.chmod(dst, default_mode)
    os.symlink(os.path.basename(ts), os.path.join(target, "..data"))
    for key in data:
        os.symlink(os.path.join("..data", key), os.path.join(target, key))
    os.chmod(ts, 0o755)
    os.chmod(target, 0o755)
    if fs_group is not None:
        for p in (target, ts) + tuple(os.path.join(ts, k) for k in data):
            st = os.lstat(p)
            os.lchown(p, -1, fs_group)
            mode = st.st_mode & 0o7777 | 0o440
            if os.path.isdir(p):
                mode |= 0o2000 | 0o110
            os.chmod(p, mode)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_case(name, dep, certs, work):
    spec = dep["spec"]["template"]["spec"]
    sc = spec.get("securityContext", {})
    c = spec["containers"][0]
    vol = [v for v in spec.get("volumes", []) if v["name"] == "tls"]
    mnt = [m for m in c.get("volumeMounts", []) if m["name"] == "tls"]
    if not vol or not mnt:
        fail("%s: no tls volume or mount" % name)
    secret = vol[0]["secret"]
    mode = secret.get("defaultMode", 0o644)
    uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
    fs_group = sc.get("fsGroup")
    if not uid or not sc.get("runAsNonRoot"):
        fail("%s: the extender should run as a non-root user" % name)
    root = os.path.join(work, name)
    mount = root + mnt[0]["mountPath"]
    os.makedirs(os.path.dirname(mount), exist_ok=True)
    os.chmod(work, 0o755)
    for p in (root, os.path.dirname(mount), os.path.dirname(
            os.path.dirname(mount))):
        os.chmod(p, 0o755)
    kubelet_secret_volume(mount, {
        "tls.crt": os.path.join(certs, "tls.crt"),
        "tls.key": os.path.join(certs, "tls.key"),
        "client-ca.crt": os.path.join(certs, "ca.crt")}, mode, fs_group)
    port, hport = free_port(), free_port()
    args = list(c["args"])
    for i, a in enumerate(args):
        if a.startswith("/etc/"):
            args[i] = root + a
        elif a.startswith("0.0.0.0:8888"):
            args[i] = "127.0.0.1:%d" % port
        elif a.startswith("0.0.0.0:8889"):
            args[i] = "127.0.0.1:%d" % hport
    args += ["--no-kube"]
    print("%s: secret files mode %o, owner 0:%s; running as %s:%s with "
          "groups %s" % (name, os.stat(os.path.join(mount, "tls.key")).st_mode
                         & 0o7777, os.stat(os.path.join(mount,
                                                        "tls.key")).st_gid,
                         uid, gid, [fs_group] if fs_group else []))
    log = open(os.path.join(work, name + ".log"), "w+")
    p = subprocess.Popen([GPUFRAC] + args, stdout=log, stderr=subprocess.STDOUT,
                         user=uid, group=gid if gid is not None else uid,
                         extra_groups=[fs_group] if fs_group else [],
                         cwd="/")
    try:
        deadline = time.time() + 10
        body = b'{"Pod":{"metadata":{"name":"p","namespace":"n"}},"NodeNames":[]}'
        code = None
        while time.time() < deadline:
            if p.poll() is not None:
                log.seek(0)
                fail("%s: the extender exited %d: %s" % (name, p.returncode,
                                                         log.read()))
            r = subprocess.run(
                ["curl", "-sS", "--max-time", "3", "--cacert",
                 os.path.join(certs, "ca.crt"), "--cert",
                 os.path.join(certs, "client.crt"), "--key",
                 os.path.join(certs, "client.key"), "-o", "/dev/null", "-w",
                 "%{http_code}", "-H", "Content-Type: application/json",
                 "--data-binary", "@-",
                 "https://127.0.0.1:%d/filter" % port],
                input=body, capture_output=True)
            code = r.stdout
            if code == b"200":
                break
            time.sleep(0.2)
        if code != b"200":
            fail("%s: kube-scheduler's client certificate got %r" % (name,
                                                                     code))
        r = subprocess.run(
            ["curl", "-sS", "--max-time", "3", "--cacert",
             os.path.join(certs, "ca.crt"), "--cert",
             os.path.join(certs, "serveronly.crt"), "--key",
             os.path.join(certs, "serveronly.key"), "-w", "\n%{http_code}",
             "--data-binary", "@-", "https://127.0.0.1:%d/filter" % port],
            input=body, capture_output=True)
        if not r.stdout.endswith(b"403") or b"clientAuth" not in r.stdout:
            fail("%s: a server-only certificate got %r" % (name, r.stdout))
        print("%s: HTTPS up as uid %s; client certificate 200, server-only "
              "certificate 403" % (name, uid))
    finally:
        p.terminate()
        p.wait(10)


def main():
    global HELM, GPUFRAC
    HELM, GPUFRAC = sys.argv[1], os.path.abspath(sys.argv[2])
    if os.geteuid() != 0:
        fail("this test lays out files as the kubelet does (chown) and runs "
             "the extender as another user: it needs root")
    work = tempfile.mkdtemp(prefix="gpufrac-tls-secret-")
    os.chmod(work, 0o755)
    certs = os.path.join(work, "certs")
    os.makedirs(certs)
    make_certs(certs)
    run_case("deploy", from_manifest(), certs, work)
    run_case("chart", from_chart(), certs, work)
    shutil.rmtree(work)
    print("ok")


if __name__ == "__main__":
    main()
