#!/usr/bin/python3
"""A stateful Kubernetes API-server TEST DOUBLE for gpufrac's end-to-end
test and benchmarks.  It is NOT an API server: it serves only the calls the
gpufrac extender makes, over plain HTTP on 127.0.0.1, and keeps just enough
state to answer them the way the real API server does:

  GET  /api/v1/nodes, /api/v1/pods            LIST, paginated (limit,
                                               continue; pages capped at
                                               MAX_PAGE items)
  GET  ...?watch=1&allowWatchBookmarks=true   WATCH: chunked transfer
       &resourceVersion=RV&timeoutSeconds=N   encoding, one JSON event per
                                               line, BOOKMARKs every second
  GET  /api/v1/pods?fieldSelector=spec.nodeName=N   LIST and WATCH of the
                                               pods bound to N only; a pod
                                               that moves in or out of the
                                               selection is ADDED or DELETED
                                               (the old object), as the API
                                               server's watch cache does
  GET  /api/v1/namespaces/NS/pods/NAME        one pod
  PATCH /api/v1/namespaces/NS/pods/NAME       merge patch of the
                                               disruption guard's annotations
                                               only (with a resourceVersion;
                                               409 Conflict when it is
                                               stale, as the API server); a
                                               grant is never PATCHed: it
                                               rides in the Binding
  PATCH /api/v1/nodes/NAME                    merge patch of the inventory
                                               annotation only (the node
                                               agent's one write)
  POST /api/v1/namespaces/NS/pods/NAME/binding  v1 Binding (uid checked;
                                               409 when already bound); its
                                               metadata.annotations merged
                                               into the pod in the same
                                               write, as kube-apiserver's
                                               BindingREST does
  GET  /apis/policy/v1/poddisruptionbudgets   LIST and WATCH (the preempt
                                               verb's budgets; none here)
  GET/POST/PUT coordination.k8s.io/v1 leases   PUT needs the current
                                               resourceVersion (409 if not)

It is strict: any other request, a wrong bearer token, a wrong content type
a PATCH touching anything but the guard's annotations (pods)
or the inventory (nodes), or
a field selector other than spec.nodeName on pods is answered 400/404 and
recorded in `errors`, which the tests require to be empty at the end.

Used in-process by tests/sched/test_e2e.py and tests/node/agent_e2e.py
(Double class) and from the command line by bench/sched_wrk.sh:

  apiserver_double.py --port P --kubeconfig KC.json --nodes N --pods M
"""
import argparse
import copy
import http.server
import json
import socketserver
import sys
import threading
import time
import urllib.parse

MAX_PAGE = 500
TOKEN = "e2e-token"
GRANT = "gpufrac.io/grant"
INVENTORY = "gpufrac.io/inventory"
# What the extender's disruption guard writes (src/sched/guard.h).
DND = "karpenter.sh/do-not-disrupt"
STE = "cluster-autoscaler.kubernetes.io/safe-to-evict"
GUARD_KEYS = {DND, STE, "gpufrac.io/guard-owns", "gpufrac.io/guard-since",
              "gpufrac.io/guard-released"}
GiB = 1 << 30


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason,
            "code": code}


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


KINDS = {"nodes": "Node", "pods": "Pod",
         "poddisruptionbudgets": "PodDisruptionBudget"}

class State:
    """Nodes, pods and leases with one resourceVersion counter and an
    event log per resource (never compacted: no 410 here)."""

    def __init__(self):
        self.mu = threading.Condition()
        self.rv = 1000
        self.objs = {"nodes": {}, "pods": {}, "leases": {},
                     "poddisruptionbudgets": {}}
        self.events = {"nodes": [], "pods": [], "poddisruptionbudgets": []}
        self.errors = []
        self.conflicts = 0  # 409s returned on (guard) PATCHes
        self.guard_patches = 0  # the disruption guard's PATCHes applied
        self.guard_protects = {}  # pod key -> writes (PATCH or Binding) that set guard-since
        self.protect_patches = 0  # of those, PATCHes (the rest rode in Bindings)
        self.binds = 0
        self.node_patches = 0  # inventory PATCHes (the node agent)
        self.requests = 0
        self.snapshots = {}
        self.next_snap = 0
        self.stopping = False

    def _bump(self, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _emit(self, res, typ, obj, prev=None):
        """Logs an event; prev is the object before a MODIFIED (for watches
        with a field selector)."""
        if res in self.events:
            self.events[res].append((self.rv, typ, copy.deepcopy(obj),
                                     copy.deepcopy(prev)))
            self.mu.notify_all()

    def put(self, res, key, obj):
        with self.mu:
            prev = self.objs[res].get(key)
            typ = "MODIFIED" if prev is not None else "ADDED"
            obj = copy.deepcopy(obj)
            self._bump(obj)
            self.objs[res][key] = obj
            self._emit(res, typ, obj, prev)
            return copy.deepcopy(obj)

    def delete(self, res, key):
        with self.mu:
            obj = self.objs[res].pop(key, None)
            if obj is not None:
                self._bump(obj)
                self._emit(res, "DELETED", obj)
            return obj

    def get(self, res, key):
        with self.mu:
            o = self.objs[res].get(key)
            return copy.deepcopy(o) if o is not None else None

    def error(self, msg):
        with self.mu:
            self.errors.append(msg)


def pod_key(ns, name):
    return ns + "/" + name


def node_selector(res, q):
    """The node name of a fieldSelector=spec.nodeName=N on pods; None when
    there is no selector; raises ValueError for any other selector (the
    only one the agent sends; the double does not pretend to know more)."""
    sel = q.get("fieldSelector")
    if sel is None:
        return None
    if res != "pods" or not sel.startswith("spec.nodeName=") or \
            "," in sel or "!" in sel:
        raise ValueError("unsupported fieldSelector %r" % sel)
    return sel[len("spec.nodeName="):]


def on_node(obj, node):
    return obj is not None and obj.get("spec", {}).get("nodeName", "") == node


def filtered(typ, obj, prev, node):
    """One watch event as a watch limited to pods on `node` sees it (the
    API server's cacher: moving in is ADDED, moving out is DELETED with the
    previous object at the new resourceVersion), or None."""
    if node is None:
        return typ, obj
    if typ == "DELETED":
        return (typ, obj) if on_node(obj, node) else None
    now, before = on_node(obj, node), on_node(prev, node)
    if now:
        return ("MODIFIED" if before else "ADDED"), obj
    if before:
        old = copy.deepcopy(prev)
        old["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        return "DELETED", old
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "apiserver-double/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    @property
    def st(self):
        return self.server.state

    def _send(self, code, obj):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _strict(self, code, msg):
        self.st.error("%s %s: %s" % (self.command, self.path, msg))
        self._send(code, status(code, "BadRequest" if code == 400
                                else "NotFound", "test double: " + msg))

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _auth(self):
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            self._strict(401, "missing or wrong bearer token")
            return False
        with self.st.mu:
            self.st.requests += 1
        return True

    # ---- routing ---------------------------------------------------------
    def do_GET(self):
        if not self._auth():
            return
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        p = u.path.rstrip("/").split("/")
        if u.path in ("/api/v1/nodes", "/api/v1/pods",
                      "/apis/policy/v1/poddisruptionbudgets"):
            res = p[-1]
            if q.get("watch") in ("1", "true"):
                return self._watch(res, q)
            return self._list(res, q)
        if len(p) == 7 and p[1:4] == ["api", "v1", "namespaces"] and \
                p[5] == "pods":
            o = self.st.get("pods", pod_key(p[4], p[6]))
            if o is None:
                return self._send(404, status(404, "NotFound",
                                              'pods "%s" not found' % p[6]))
            return self._send(200, o)
        if self._lease_path(p) and len(p) == 8:
            o = self.st.get("leases", p[5] + "/" + p[7])
            if o is None:
                return self._send(404, status(404, "NotFound",
                                              "lease not found"))
            return self._send(200, o)
        self._strict(404, "unknown GET")

    def do_PATCH(self):
        if not self._auth():
            return
        u = urllib.parse.urlsplit(self.path)
        p = u.path.split("/")
        if len(p) == 5 and p[1:4] == ["api", "v1", "nodes"] and p[4] and \
                not u.query:
            return self._patch_node(p[4])
        if not (len(p) == 7 and p[1:4] == ["api", "v1", "namespaces"] and
                p[5] == "pods") or u.query:
            return self._strict(404, "unknown PATCH")
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self._strict(400, "PATCH content type is not merge-patch")
        patch = self._body()
        md = patch.get("metadata") if isinstance(patch, dict) else None
        anns = set((md.get("annotations") or {}) if isinstance(md, dict)
                   else {})
        guard = bool(anns) and anns <= GUARD_KEYS
        if not isinstance(md, dict) or set(patch) != {"metadata"} or \
                not set(md) <= {"annotations", "resourceVersion"} or \
                not guard:
            return self._strict(400, "PATCH touches more than the guard's "
                                "annotations (a grant rides in the "
                                "Binding): %r" % (patch,))
        if guard and "resourceVersion" not in md:
            return self._strict(400, "guard PATCH without a resourceVersion "
                                "precondition: %r" % (patch,))
        key = pod_key(p[4], p[6])
        st = self.st
        with st.mu:
            cur = st.objs["pods"].get(key)
            if cur is None:
                return self._send(404, status(404, "NotFound",
                                              'pods "%s" not found' % p[6]))
            want = md.get("resourceVersion")
            if want is not None and want != cur["metadata"]["resourceVersion"]:
                st.conflicts += 1
                return self._send(409, status(
                    409, "Conflict",
                    'Operation cannot be fulfilled on pods "%s": the object '
                    "has been modified; please apply your changes to the "
                    "latest version and try again" % p[6]))
            patch["metadata"].pop("resourceVersion", None)
            new = merge_patch(cur, patch)
            if guard:
                st.guard_patches += 1
                if "gpufrac.io/guard-since" in md["annotations"]:
                    st.guard_protects[key] = st.guard_protects.get(key, 0) + 1
                    st.protect_patches += 1
            st._bump(new)
            st.objs["pods"][key] = new
            st._emit("pods", "MODIFIED", new, cur)
            out = copy.deepcopy(new)
        self._send(200, out)

    def _patch_node(self, name):
        """The node agent's inventory: a merge patch that sets exactly the
        gpufrac.io/inventory annotation to a string."""
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self._strict(400, "PATCH content type is not merge-patch")
        patch = self._body()
        md = patch.get("metadata") if isinstance(patch, dict) else None
        ann = md.get("annotations") if isinstance(md, dict) else None
        if not isinstance(ann, dict) or set(patch) != {"metadata"} or \
                set(md) != {"annotations"} or set(ann) != {INVENTORY} or \
                not isinstance(ann[INVENTORY], str):
            return self._strict(400, "node PATCH touches more than the "
                                "inventory: %r" % (patch,))
        st = self.st
        with st.mu:
            cur = st.objs["nodes"].get(name)
            if cur is None:
                return self._send(404, status(404, "NotFound",
                                              'nodes "%s" not found' % name))
            new = merge_patch(cur, patch)
            st._bump(new)
            st.objs["nodes"][name] = new
            st._emit("nodes", "MODIFIED", new, cur)
            st.node_patches += 1
            out = copy.deepcopy(new)
        self._send(200, out)

    def do_POST(self):
        if not self._auth():
            return
        u = urllib.parse.urlsplit(self.path)
        p = u.path.split("/")
        body = self._body()
        if len(p) == 8 and p[1:4] == ["api", "v1", "namespaces"] and \
                p[5] == "pods" and p[7] == "binding":
            return self._bind(p[4], p[6], body)
        if self._lease_path(p) and len(p) == 7:
            if not isinstance(body, dict) or body.get("kind") != "Lease":
                return self._strict(400, "not a Lease")
            name = body.get("metadata", {}).get("name", "")
            key = p[5] + "/" + name
            with self.st.mu:
                if key in self.st.objs["leases"]:
                    return self._send(409, status(409, "AlreadyExists",
                                                  "lease exists"))
                body["metadata"]["namespace"] = p[5]
                self.st._bump(body)
                self.st.objs["leases"][key] = body
                out = copy.deepcopy(body)
            return self._send(201, out)
        self._strict(404, "unknown POST")

    def do_PUT(self):
        if not self._auth():
            return
        p = urllib.parse.urlsplit(self.path).path.split("/")
        body = self._body()
        if not (self._lease_path(p) and len(p) == 8) or \
                not isinstance(body, dict):
            return self._strict(404, "unknown PUT")
        key = p[5] + "/" + p[7]
        with self.st.mu:
            cur = self.st.objs["leases"].get(key)
            if cur is None:
                return self._send(404, status(404, "NotFound", "no lease"))
            if body.get("metadata", {}).get("resourceVersion") != \
                    cur["metadata"]["resourceVersion"]:
                return self._send(409, status(409, "Conflict",
                                              "lease modified"))
            self.st._bump(body)
            self.st.objs["leases"][key] = body
            out = copy.deepcopy(body)
        self._send(200, out)

    do_DELETE = do_HEAD = lambda self: self._strict(404, "unknown method")

    @staticmethod
    def _lease_path(p):
        return len(p) >= 7 and p[1:5] == ["apis", "coordination.k8s.io",
                                          "v1", "namespaces"] and \
            p[6] == "leases"

    # ---- verbs -----------------------------------------------------------
    def _list(self, res, q):
        st = self.st
        extra = set(q) - {"limit", "continue", "resourceVersion",
                          "fieldSelector"}
        if extra:
            return self._strict(400, "unexpected LIST parameters %s" % extra)
        try:
            node = node_selector(res, q)
        except ValueError as e:
            return self._strict(400, str(e))
        limit = int(q.get("limit", "0") or 0)
        limit = min(limit, MAX_PAGE) if limit > 0 else MAX_PAGE
        with st.mu:
            tok = q.get("continue")
            if tok:
                snap = st.snapshots.get(tok)
                if snap is None:
                    return self._strict(400, "unknown continue token")
                items, rv, start = snap
            else:
                items = [copy.deepcopy(st.objs[res][k])
                         for k in sorted(st.objs[res])
                         if node is None or on_node(st.objs[res][k], node)]
                rv, start = st.rv, 0
            page = items[start:start + limit]
            cont = ""
            if start + limit < len(items):
                st.next_snap += 1
                cont = "c%d" % st.next_snap
                st.snapshots[cont] = (items, rv, start + limit)
        kind = KINDS[res] + "List"
        self._send(200, {"kind": kind, "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(rv),
                                      "continue": cont},
                         "items": page})

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, res, q):
        st = self.st
        want = {"watch", "allowWatchBookmarks", "resourceVersion",
                "timeoutSeconds"}
        if set(q) - {"fieldSelector"} != want or \
                q["allowWatchBookmarks"] != "true":
            return self._strict(400, "WATCH parameters %s" % sorted(q))
        try:
            node = node_selector(res, q)
        except ValueError as e:
            return self._strict(400, str(e))
        since = int(q["resourceVersion"])
        deadline = time.time() + min(int(q["timeoutSeconds"]), 30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        kind = KINDS[res]
        sent = since
        try:
            while True:
                with st.mu:
                    evs = [e for e in st.events[res] if e[0] > sent]
                    if not evs and not st.stopping:
                        st.mu.wait(timeout=1.0)
                        evs = [e for e in st.events[res] if e[0] > sent]
                    cur = st.rv
                    stopping = st.stopping
                shown = 0
                for rv, typ, obj, prev in evs:
                    ev = filtered(typ, obj, prev, node)
                    sent = rv
                    if ev is None:
                        continue
                    self._chunk(json.dumps({"type": ev[0], "object": ev[1]},
                                           separators=(",", ":")).encode() +
                                b"\n")
                    shown += 1
                if not shown:
                    sent = max(sent, cur)
                    self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(sent)}}})
                        .encode() + b"\n")
                if stopping or time.time() > deadline:
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _bind(self, ns, name, b):
        st = self.st
        if not isinstance(b, dict) or b.get("kind") != "Binding" or \
                b.get("apiVersion") != "v1" or \
                b.get("target", {}).get("kind") != "Node":
            return self._strict(400, "not a v1 Binding to a Node: %r" % (b,))
        node = b["target"].get("name")
        uid = b.get("metadata", {}).get("uid")
        key = pod_key(ns, name)
        with st.mu:
            cur = st.objs["pods"].get(key)
            if cur is None:
                return self._send(404, status(404, "NotFound",
                                              'pods "%s" not found' % name))
            if uid and uid != cur["metadata"]["uid"]:
                return self._send(409, status(409, "Conflict",
                                              "Precondition failed: UID"))
            if cur["spec"].get("nodeName"):
                return self._send(409, status(
                    409, "Conflict", 'pod %s is already assigned to node "%s"'
                    % (name, cur["spec"]["nodeName"])))
            if node not in st.objs["nodes"]:
                st.errors.append("binding %s to unknown node %s" % (key, node))
            anns = b.get("metadata", {}).get("annotations") or {}
            if not isinstance(anns, dict) or \
                    not all(isinstance(v, str) for v in anns.values()):
                return self._strict(400, "Binding annotations are not "
                                    "strings: %r" % (anns,))
            held = cur["metadata"].get("annotations") or {}
            for k in (DND, STE):
                if k in anns and k in held:
                    st.errors.append("Binding of %s overwrote the pod's own "
                                     "%s: %r" % (key, k, held[k]))
            if "gpufrac.io/guard-since" in anns:
                st.guard_protects[key] = st.guard_protects.get(key, 0) + 1
            prev, cur = cur, copy.deepcopy(cur)
            cur["spec"]["nodeName"] = node
            cur["metadata"].setdefault("annotations", {}).update(anns)
            cur["status"] = {"phase": "Running"}
            st._bump(cur)
            st.objs["pods"][key] = cur
            st._emit("pods", "MODIFIED", cur, prev)
            st.binds += 1
        self._send(201, {"kind": "Status", "apiVersion": "v1",
                         "metadata": {}, "status": "Success", "code": 201})


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Double:
    """The double on a background thread: Double().start() -> url."""

    def __init__(self, port=0):
        self.state = State()
        self.httpd = Server(("127.0.0.1", port), Handler)
        self.httpd.state = self.state
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        with self.state.mu:
            self.state.stopping = True
            self.state.mu.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path):
        kc = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": "double", "cluster": {"server": self.url}}],
              "users": [{"name": "e2e", "user": {"token": TOKEN}}],
              "contexts": [{"name": "e2e", "context": {"cluster": "double",
                                                       "user": "e2e"}}],
              "current-context": "e2e"}
        with open(path, "w") as f:
            json.dump(kc, f)

    # ---- what kubectl / the kubelet / controllers would do -------------
    def add_node(self, name, gpus, cpu="64", memory="512Gi"):
        inv = {"version": 1, "gpus": [
            {"index": i, "uuid": "GPU-%s-%d" % (name, i), "model": m,
             "memory": "%dGi" % gib} for i, (m, gib) in enumerate(gpus)]}
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": "uid-node-" + name,
                             "annotations": {INVENTORY: json.dumps(inv)}},
                "status": {"allocatable": {"cpu": cpu, "memory": memory}}}
        return self.state.put("nodes", name, node)

    def delete_node(self, name):
        return self.state.delete("nodes", name)

    def add_pod(self, ns, name, gpu=1, mem=None, compute=None, cpu="1",
                memory="1Gi", node=None, grant=None, ready=None,
                annotations=None):
        res = {"cpu": cpu, "memory": memory}
        if gpu:
            res["gpufrac.io/gpu"] = str(gpu)
        if mem:
            res["gpufrac.io/gpu-memory"] = mem
        if compute:
            res["gpufrac.io/gpu-compute"] = str(compute)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns,
                            "uid": "uid-%s-%s" % (ns, name),
                            "annotations": dict(annotations or {})},
               "spec": {"schedulerName": "default-scheduler",
                        "containers": [{"name": "main", "image": "x",
                                        "resources": {"requests": res,
                                                      "limits": dict(res)}}]},
               "status": {"phase": "Running" if node else "Pending"}}
        if node:
            pod["spec"]["nodeName"] = node
        if grant:
            pod["metadata"]["annotations"][GRANT] = grant
        if ready is not None:  # the kubelet's Ready condition
            pod["status"]["conditions"] = [
                {"type": "Ready", "status": "True" if ready else "False"}]
        return self.state.put("pods", pod_key(ns, name), pod)

    def touch_pod(self, ns, name):
        """A label change by someone else: bumps the resourceVersion."""
        with self.state.mu:
            cur = self.state.objs["pods"].get(pod_key(ns, name))
            if cur is None:
                return None
            prev, cur = cur, copy.deepcopy(cur)
            cur["metadata"].setdefault("labels", {})["touched"] = \
                str(self.state.rv)
            self.state._bump(cur)
            self.state.objs["pods"][pod_key(ns, name)] = cur
            self.state._emit("pods", "MODIFIED", cur, prev)
            return copy.deepcopy(cur)

    def set_ready(self, ns, name, ready=True):
        """The kubelet's status: the Ready condition True or False."""
        with self.state.mu:
            cur = self.state.objs["pods"].get(pod_key(ns, name))
            if cur is None:
                return None
            prev, cur = cur, copy.deepcopy(cur)
            cur.setdefault("status", {})["conditions"] = [
                {"type": "Ready", "status": "True" if ready else "False"}]
            self.state._bump(cur)
            self.state.objs["pods"][pod_key(ns, name)] = cur
            self.state._emit("pods", "MODIFIED", cur, prev)
            return copy.deepcopy(cur)

    def delete_pod(self, ns, name):
        return self.state.delete("pods", pod_key(ns, name))

    def pods(self):
        with self.state.mu:
            return copy.deepcopy(list(self.state.objs["pods"].values()))

    def nodes(self):
        with self.state.mu:
            return copy.deepcopy(list(self.state.objs["nodes"].values()))


def synthetic(d, nnodes, npods):
    """nnodes nodes of 8 A100-80GB; npods bound pods of 10Gi/10% each,
    spread over them, with grants, Ready (as a restarted extender would
    find: the disruption guard leaves them alone)."""
    for i in range(nnodes):
        d.add_node("node-%05d" % i, [("A100-SXM4-80GB", 80)] * 8,
                   cpu="256", memory="2Ti")
    for j in range(npods):
        n, g = (j // 8) % nnodes, j % 8
        node = "node-%05d" % n
        grant = json.dumps({"version": 1, "node": node, "containers": [
            {"name": "main", "gpus": [{"uuid": "GPU-%s-%d" % (node, g),
                                       "index": g, "memory": 10 * GiB,
                                       "compute": 10}]}]},
            separators=(",", ":"))
        d.add_pod("bench", "p-%06d" % j, gpu=1, mem="10Gi", compute=10,
                  cpu="100m", memory="128Mi", node=node, grant=grant,
                  ready=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--nodes", type=int, default=0)
    ap.add_argument("--pods", type=int, default=0)
    a = ap.parse_args()
    d = Double(a.port)
    synthetic(d, a.nodes, a.pods)
    d.kubeconfig(a.kubeconfig)
    print("apiserver double (a test double, not an API server) on %s: "
          "%d nodes, %d pods" % (d.url, a.nodes, a.pods), flush=True)
    d.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    d.stop()
    if d.state.errors:
        print("double: strict errors:", *d.state.errors, sep="\n  ",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
