#!/usr/bin/python3
"""A fake kubelet on real gRPC (python3-grpcio) for the device plugin.

It serves v1beta1.Registration on a kubelet.sock in a temporary directory,
records every Register call, and dials the plugin's socket the way kubelet
does to drive GetDevicePluginOptions, ListAndWatch, GetPreferredAllocation,
Allocate and PreStartContainer.  The plugin is tests/node/dp_driver (the
C library with made-up devices and a test allocator).

    fake_kubelet.py --driver PATH --pb DIR            # the scenarios
    fake_kubelet.py --driver PATH --pb DIR --bench N  # Allocate latency, RSS

DIR holds deviceplugin/v1beta1/api_pb2.py, made by protoc --python_out from
proto/deviceplugin/v1beta1/api.proto.  Exit status 0 only when every
scenario passed.
"""
import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent import futures

import grpc

pb = None  # deviceplugin.v1beta1.api_pb2, imported in main()

SVC = "/v1beta1.DevicePlugin/"
ENDPOINT = "gpufrac.sock"


def gpu_id(g):
    return "GPU-%08d-0000-4000-8000-%012d" % (g, g)


def dev_id(g, k):
    return "%s::%d" % (gpu_id(g), k)


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def eq(got, want, what):
    if got != want:
        raise Failure("%s: got %r, want %r" % (what, got, want))


class Kubelet:
    """The Registration service on sock."""

    def __init__(self, sock):
        self.sock = sock
        self.registers = []  # (monotonic time, RegisterRequest)
        self.cv = threading.Condition()
        self.server = None
        self.started = None

    def start(self):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        h = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self._register,
                request_deserializer=pb.RegisterRequest.FromString,
                response_serializer=pb.Empty.SerializeToString)})
        srv.add_generic_rpc_handlers((h,))
        check(srv.add_insecure_port("unix:" + self.sock) != 0,
              "fake kubelet cannot listen on " + self.sock)
        srv.start()
        self.server = srv
        self.started = time.monotonic()

    def _register(self, req, ctx):
        with self.cv:
            self.registers.append((time.monotonic(), req))
            self.cv.notify_all()
        return pb.Empty()

    def wait_registers(self, n, timeout):
        end = time.monotonic() + timeout
        with self.cv:
            while len(self.registers) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(left)
        return True

    def stop(self):
        self.server.stop(0).wait()
        if os.path.exists(self.sock):
            os.unlink(self.sock)


class Driver:
    """dp_driver as a child process, commands on its stdin."""

    def __init__(self, path, d, kubelet_sock, gpus, slots, extra=(),
                 args_more=()):
        args = [path, d, kubelet_sock, ENDPOINT, str(gpus), str(slots),
                "--preferred"] + list(args_more)
        for e in extra:
            args += ["--extra", e]
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        check(line == "ready", "dp_driver did not start: %r" % line)

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def wait_regs(self, n, timeout=2.0):
        """gf__dp_registrations() once it reaches n (it counts when the
        answer arrives, a moment after kubelet saw the call)."""
        end = time.monotonic() + timeout
        while True:
            got = self.cmd("regs")
            if got == str(n) or time.monotonic() > end:
                return got
            time.sleep(0.02)

    def quit(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        return self.p.wait(timeout=20)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


class Plugin:
    """kubelet's side of the DevicePlugin service."""

    def __init__(self, sock, own_connection=False):
        # grpc shares one connection among channels to one target unless
        # told otherwise; own_connection makes this one dial its own.
        opts = [("grpc.use_local_subchannel_pool", 1)] if own_connection \
            else []
        self.ch = grpc.insecure_channel("unix:" + sock, options=opts)

    def call(self, method, req, resp_cls, timeout=10, raw=False, **kw):
        ser = (lambda b: b) if raw else (lambda m: m.SerializeToString())
        f = self.ch.unary_unary(SVC + method if "/" not in method else method,
                                request_serializer=ser,
                                response_deserializer=resp_cls.FromString)
        return f(req, timeout=timeout, **kw)

    def watch(self):
        f = self.ch.unary_stream(
            SVC + "ListAndWatch",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.ListAndWatchResponse.FromString)
        return f(pb.Empty())

    def allocate(self, containers, timeout=10):
        req = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids)
            for ids in containers])
        return self.call("Allocate", req, pb.AllocateResponse, timeout)

    def close(self):
        self.ch.close()


def rpc_error(fn):
    """Runs fn, which must fail with an RpcError; returns (code, details)."""
    try:
        fn()
    except grpc.RpcError as e:
        return e.code(), e.details()
    raise Failure("the call succeeded but should have failed")


def next_with_timeout(it, timeout):
    """The next item of a gRPC stream iterator, or Failure after timeout."""
    box = {}

    def run():
        try:
            box["v"] = next(it)
        except StopIteration:
            box["end"] = True
        except Exception as e:  # noqa: BLE001 - reported to the caller
            box["err"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise Failure("no ListAndWatch message within %.1f s" % timeout)
    if "err" in box:
        raise box["err"]
    return box.get("v")


def expect_answer(resp_c, ids):
    """One ContainerAllocateResponse against dp_driver's allocator rule."""
    gpu = ids[0].split("::")[0]
    eq(dict(resp_c.envs), {"CUDA_VISIBLE_DEVICES": gpu,
                           "GPUFRAC_DEVICE_IDS": ",".join(ids)}, "envs")
    eq([(m.container_path, m.host_path, m.read_only) for m in resp_c.mounts],
       [("/etc/gpufrac/shim.conf", "/run/gpufrac/%s/shim.conf" % gpu, True)],
       "mounts")
    eq([(d.container_path, d.host_path, d.permissions)
        for d in resp_c.devices],
       [("/dev/nvidia0", "/dev/nvidia0", "rw")], "devices")
    eq(dict(resp_c.annotations), {"gpufrac.io/slots": str(len(ids))},
       "annotations")
    eq([c.name for c in resp_c.cdi_devices], ["gpufrac.io/gpu=" + gpu],
       "cdi_devices")


def wait_until(fn, timeout, what):
    end = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > end:
            raise Failure("%s: not within %.1f s" % (what, timeout))
        time.sleep(0.02)


class Scenarios:
    GPUS, SLOTS, BAD, WAIT = 2, 4, "GPU-bad::0", "GPU-wait::0"

    def __init__(self, driver_path, pb_dir):
        self.driver_path = driver_path
        self.pb_dir = pb_dir
        self.dir = tempfile.mkdtemp(prefix="gfdp")
        self.ksock = os.path.join(self.dir, "kubelet.sock")
        self.psock = os.path.join(self.dir, ENDPOINT)
        self.kubelet = Kubelet(self.ksock)
        self.driver = None
        self.plugin = None
        self.watch = None
        self.all_ids = [dev_id(g, k) for g in range(self.GPUS)
                        for k in range(self.SLOTS)] + [self.BAD, self.WAIT]

    def start_driver(self):
        self.driver = Driver(self.driver_path, self.dir, self.ksock,
                             self.GPUS, self.SLOTS, [self.BAD, self.WAIT])

    # -- the scenarios, in order; each checks real values --

    def registers_after_kubelet_appears(self):
        self.start_driver()  # kubelet is not there yet: the plugin waits
        time.sleep(0.5)
        check(os.path.exists(self.psock), "plugin socket missing")
        self.kubelet.start()
        check(self.kubelet.wait_registers(1, 2.0),
              "no Register within 2 s of kubelet appearing")
        t, req = self.kubelet.registers[0]
        check(t - self.kubelet.started < 1.0,
              "Register took %.2f s" % (t - self.kubelet.started))
        eq(req.version, "v1beta1", "version")
        eq(req.endpoint, ENDPOINT, "endpoint")
        eq(req.resource_name, "gpufrac.io/gpu", "resource_name")
        eq(req.options.pre_start_required, False, "pre_start_required")
        eq(req.options.get_preferred_allocation_available, True,
           "get_preferred_allocation_available")
        eq(self.driver.wait_regs(1), "1", "gf__dp_registrations")
        self.plugin = Plugin(self.psock)

    def options(self):
        o = self.plugin.call("GetDevicePluginOptions", pb.Empty(),
                             pb.DevicePluginOptions)
        eq((o.pre_start_required, o.get_preferred_allocation_available),
           (False, True), "options")

    def list_and_watch(self):
        self.watch = self.plugin.watch()
        first = next_with_timeout(self.watch, 5)
        eq([d.ID for d in first.devices], self.all_ids, "device ids")
        check(all(d.health == "Healthy" for d in first.devices),
              "a device is not Healthy at start")
        numa = {d.ID: [n.ID for n in d.topology.nodes] for d in first.devices}
        eq(numa[dev_id(1, 2)], [1], "NUMA node of GPU 1")
        eq(numa[dev_id(0, 0)], [0], "NUMA node of GPU 0")
        eq(numa[self.BAD], [], "NUMA nodes of a device without topology")
        sick = dev_id(1, 3)
        eq(self.driver.cmd("unhealthy " + sick), "ok", "driver unhealthy")
        upd = next_with_timeout(self.watch, 2)
        health = {d.ID: d.health for d in upd.devices}
        eq(len(health), len(self.all_ids), "devices in the update")
        eq(health[sick], "Unhealthy", "health of %s" % sick)
        check(all(h == "Healthy" for i, h in health.items() if i != sick),
              "only %s should be Unhealthy" % sick)
        eq(self.driver.cmd("healthy " + sick), "ok", "driver healthy")
        upd = next_with_timeout(self.watch, 2)
        check(all(d.health == "Healthy" for d in upd.devices),
              "every device Healthy again")

    def allocate(self):
        a, b = [dev_id(1, 2)], [dev_id(0, 0), dev_id(0, 1)]
        resp = self.plugin.allocate([a, b])
        eq(len(resp.container_responses), 2, "container responses")
        expect_answer(resp.container_responses[0], a)
        expect_answer(resp.container_responses[1], b)

    def concurrent_allocates(self):
        errors = []
        barrier = threading.Barrier(2)

        def worker(g):
            p = Plugin(self.psock)  # its own connection, as a second caller
            try:
                barrier.wait()
                for i in range(40):
                    ids = [dev_id(g, i % self.SLOTS)]
                    r = self.plugin.allocate([ids]) if i % 2 else \
                        p.allocate([ids])
                    expect_answer(r.container_responses[0], ids)
            except Exception as e:  # noqa: BLE001 - collected
                errors.append(e)
            finally:
                p.close()
        ts = [threading.Thread(target=worker, args=(g,)) for g in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not errors, "concurrent Allocate: %r" % errors[:1])

    def start_waiting_allocate(self):
        """An Allocate of WAIT on its own connection, in a thread, once
        the allocator holds it (dp_driver waits until `release`).  Returns
        (thread, box): box["resp"] or box["err"] when it ends."""
        box = {}

        def run():
            p = Plugin(self.psock)
            try:
                box["resp"] = p.allocate([[self.WAIT]], timeout=60)
            except Exception as e:  # noqa: BLE001 - reported by the caller
                box["err"] = e
            finally:
                p.close()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        wait_until(lambda: self.driver.cmd("waiting") == "1", 5,
                   "the Allocate of %s waiting in the allocator" % self.WAIT)
        return t, box

    def waiting_allocate_blocks_nothing(self):
        """While one Allocate waits (as the agent's waits for its pod),
        another Allocate, a new ListAndWatch and GetDevicePluginOptions
        are all answered; the waiting one ends last, once released.  The
        check is the order of completions, not how long anything took."""
        done, lock = [], threading.Lock()
        waiter, box = self.start_waiting_allocate()
        ids = [dev_id(1, 1)]

        def other_allocate():
            expect_answer(self.plugin.allocate([ids]).container_responses[0],
                          ids)

        def new_watch():
            p = Plugin(self.psock)
            try:
                eq(len(next(p.watch()).devices), len(self.all_ids),
                   "first list of a new ListAndWatch")
            finally:
                p.close()

        def options():
            self.options()
        errors = []

        def run(name, fn):
            try:
                fn()
                with lock:
                    done.append(name)
            except Exception as e:  # noqa: BLE001 - collected
                errors.append((name, e))
        others = [threading.Thread(target=run, args=(n, f), daemon=True)
                  for n, f in (("allocate", other_allocate),
                               ("watch", new_watch), ("options", options))]
        for t in others:
            t.start()
        # Release once the three are done; if they never are (the server
        # is stuck behind the waiting call), release anyway after a while
        # so the test ends, and the order below tells.
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with lock:
                if len(done) == 3:
                    break
            time.sleep(0.02)
        eq(self.driver.cmd("release"), "ok", "driver release")
        waiter.join(20)
        for t in others:
            t.join(20)
        with lock:
            done.append("waiting allocate" if "resp" in box else
                        "waiting allocate failed: %r" % box.get("err"))
        check(not errors, "calls beside the waiting one: %r" % errors)
        eq(sorted(done[:3]), ["allocate", "options", "watch"],
           "the three calls beside the waiting one end first")
        eq(done[3], "waiting allocate", "the waiting Allocate ends last")
        expect_answer(box["resp"].container_responses[0], [self.WAIT])

    def stop_while_allocate_waits(self):
        """Stopping the plugin while an Allocate waits: the waiting call
        is told UNAVAILABLE and the plugin stops (dp_driver's quit would
        hang until `release` if stopping waited for it)."""
        waiter, box = self.start_waiting_allocate()
        try:
            rc = self.driver.quit()
        except subprocess.TimeoutExpired:
            self.driver.kill()
            raise Failure("dp_driver did not stop while an Allocate waited")
        eq(rc, 0, "dp_driver exit status")
        waiter.join(10)
        check("err" in box, "the waiting Allocate failed: %r" % box)
        eq(box["err"].code(), grpc.StatusCode.UNAVAILABLE,
           "status of the waiting Allocate")

    def idle_connections_do_not_lock_out_kubelet(self):
        """A plugin of its own with 1 s timeouts.  Kubelet's connection
        (a ListAndWatch open) is up; then 70 connections that say nothing
        or send half a frame: more than the 64 slots.  A new kubelet
        connection still gets in and is answered, kubelet's own connection
        keeps working, and every idle or half-sent connection is closed by
        the server (EOF) after the timeout."""
        d = tempfile.mkdtemp(prefix="gfdpi")
        sock = os.path.join(d, ENDPOINT)
        drv = Driver(self.driver_path, d, os.path.join(d, "kubelet.sock"),
                     1, 2, args_more=["--idle-ms", "1000", "--preface-ms",
                                      "1000"])
        raws, kube, kube2 = [], None, None
        try:
            kube = Plugin(sock)
            w = kube.watch()
            eq(len(next_with_timeout(w, 5).devices), 2, "kubelet's list")
            preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
            # HEADERS on stream 1 announcing 100 bytes, 11 sent (:method
            # POST, :scheme http, :path /, then part of a literal header).
            half = b"\x00\x00\x64\x01\x04\x00\x00\x00\x01" + \
                b"\x83\x86\x84\x40\x0a" + b"custom"
            for i in range(70):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5)
                s.connect(sock)
                # The server's SETTINGS (or the close of one it had no
                # room for): it has taken this connection in.
                try:
                    if i % 2:
                        s.sendall(preface + settings + half)
                    s.recv(4096)
                except socket.timeout:
                    raise Failure("connection %d: no SETTINGS from the "
                                  "server" % i)
                except (ConnectionResetError, BrokenPipeError):
                    pass  # closed with our bytes unread: taken in too
                raws.append(s)
            # Kubelet dialing anew (a restart, say): a connection of its own.
            kube2 = Plugin(sock, own_connection=True)
            o = kube2.call("GetDevicePluginOptions", pb.Empty(),
                           pb.DevicePluginOptions, timeout=5)
            eq(o.get_preferred_allocation_available, True,
               "options on a new connection with every slot taken")
            ids = [dev_id(0, 1)]
            expect_answer(kube.allocate([ids]).container_responses[0], ids)
            for i, s in enumerate(raws):
                s.settimeout(10)
                got = b"x"
                try:
                    while got:
                        got = s.recv(4096)
                except ConnectionResetError:
                    pass  # closed, our bytes unread
                except socket.timeout:
                    raise Failure("connection %d (%s) still open 10 s on; "
                                  "the timeouts are 1 s" %
                                  (i, "half-sent" if i % 2 else "silent"))
            # Kubelet's watch outlives the timeout and still gets updates.
            eq(drv.cmd("unhealthy " + dev_id(0, 0)), "ok", "driver")
            upd = next_with_timeout(w, 3)
            eq({x.ID: x.health for x in upd.devices}[dev_id(0, 0)],
               "Unhealthy", "update on kubelet's watch after the timeouts")
            o = kube2.call("GetDevicePluginOptions", pb.Empty(),
                           pb.DevicePluginOptions, timeout=5)
            eq(o.pre_start_required, False, "options again (reconnected)")
            w.cancel()
            eq(drv.quit(), 0, "dp_driver exit status")
        finally:
            for s in raws:
                s.close()
            for p in (kube, kube2):
                if p:
                    p.close()
            drv.kill()
            shutil.rmtree(d, ignore_errors=True)

    def watches_do_not_lock_out_kubelet(self):
        """A plugin of its own.  Busy connections (each holding a
        ListAndWatch, which the server owes updates) fill all 64 slots.
        (1) Kubelet not registered yet: another process opens 70 watches;
        kubelet's new connection still gets in (the server closes the
        newest of the process holding the most), and kubelet's first watch
        keeps getting updates.  (2) Kubelet registered (its pid learnt
        from the Register call): kubelet itself holds 40 watches and
        another process opens 40; none of kubelet's 40 is closed for
        them."""
        d = tempfile.mkdtemp(prefix="gfdpw")
        sock = os.path.join(d, ENDPOINT)
        ksock = os.path.join(d, "kubelet.sock")
        drv = Driver(self.driver_path, d, ksock, 1, 2)
        kl = Kubelet(ksock)
        kube, kube2, hold, hold2, mine = None, None, None, None, []
        try:
            kube = Plugin(sock)
            w = kube.watch()
            eq(len(next_with_timeout(w, 5).devices), 2, "kubelet's list")
            hold = Holder(self.driver_path, self.pb_dir, sock, 70)
            check(hold.held >= 63, "the other process got %d lists of 70"
                  % hold.held)
            kube2 = Plugin(sock, own_connection=True)
            o = kube2.call("GetDevicePluginOptions", pb.Empty(),
                           pb.DevicePluginOptions, timeout=5)
            eq(o.get_preferred_allocation_available, True,
               "options on a new connection with every slot busy")
            ids = [dev_id(0, 1)]
            expect_answer(kube.allocate([ids]).container_responses[0], ids)
            eq(drv.cmd("unhealthy " + dev_id(0, 0)), "ok", "driver")
            upd = next_with_timeout(w, 3)
            eq({x.ID: x.health for x in upd.devices}[dev_id(0, 0)],
               "Unhealthy", "update on kubelet's first watch")
            hold.stop()
            hold = None
            # (2) kubelet registers: its pid is trusted from now on.
            kl.start()
            check(kl.wait_registers(1, 10), "no Register within 10 s")
            eq(drv.wait_regs(1), "1", "registrations")
            for i in range(40):
                p = Plugin(sock, own_connection=True)
                pw = p.watch()
                next_with_timeout(pw, 5)
                mine.append((p, pw))
            hold2 = Holder(self.driver_path, self.pb_dir, sock, 40)
            eq(drv.cmd("healthy " + dev_id(0, 0)), "ok", "driver")
            for i, (p, pw) in enumerate(mine):
                try:
                    upd = next_with_timeout(pw, 5)
                except Exception as e:  # noqa: BLE001 - reported
                    raise Failure("kubelet's watch %d of 40 lost while "
                                  "another process filled the slots: %r"
                                  % (i, e))
                eq({x.ID: x.health for x in upd.devices}[dev_id(0, 0)],
                   "Healthy", "update on kubelet's watch %d" % i)
            eq(drv.quit(), 0, "dp_driver exit status")
        finally:
            for h in (hold, hold2):
                if h:
                    h.stop()
            for p, pw in mine:
                pw.cancel()
                p.close()
            for p in (kube, kube2):
                if p:
                    p.close()
            drv.kill()
            if kl.server:
                kl.stop()
            shutil.rmtree(d, ignore_errors=True)

    def allocate_failure(self):
        code, msg = rpc_error(lambda: self.plugin.allocate([[self.BAD]]))
        eq(code, grpc.StatusCode.FAILED_PRECONDITION, "status")
        eq(msg, "device GPU-bad::0 is broken: refusing to hand it out",
           "message")
        ids = [dev_id(0, 3)]
        expect_answer(self.plugin.allocate([ids]).container_responses[0], ids)
        code, msg = rpc_error(lambda: self.plugin.allocate(
            [[dev_id(0, 0)], ["GPU-nope::7"]]))
        eq(code, grpc.StatusCode.INVALID_ARGUMENT, "unknown id status")
        check("GPU-nope::7" in msg, "message names the id: %r" % msg)
        code, _ = rpc_error(lambda: self.plugin.allocate([[]]))
        eq(code, grpc.StatusCode.INVALID_ARGUMENT, "no ids status")

    def unknown_method(self):
        code, msg = rpc_error(lambda: self.plugin.call(
            "Nope", pb.Empty(), pb.Empty))
        eq(code, grpc.StatusCode.UNIMPLEMENTED, "status")
        check("Nope" in msg, "message names the method: %r" % msg)
        code, _ = rpc_error(lambda: self.plugin.call(
            "/v1beta1.Registration/Register", pb.RegisterRequest(),
            pb.Empty))
        eq(code, grpc.StatusCode.UNIMPLEMENTED, "Register on the plugin")

    def preferred_allocation(self):
        g0 = [dev_id(0, k) for k in range(4)]
        g1 = [dev_id(1, 3), dev_id(1, 1)]
        C = pb.ContainerPreferredAllocationRequest
        req = pb.PreferredAllocationRequest(container_requests=[
            C(available_deviceIDs=g0 + g1, allocation_size=2),
            C(available_deviceIDs=g0 + g1, must_include_deviceIDs=[g0[2]],
              allocation_size=3),
            C(available_deviceIDs=g0[::-1], allocation_size=1),
            C(available_deviceIDs=[self.BAD] + g0, allocation_size=2)])
        r = self.plugin.call("GetPreferredAllocation", req,
                             pb.PreferredAllocationResponse)
        got = [list(c.deviceIDs) for c in r.container_responses]
        eq(got, [[dev_id(1, 1), dev_id(1, 3)],          # GPU 1: 2 free
                 [g0[2], dev_id(1, 1), dev_id(1, 3)],   # must first
                 [dev_id(0, 0)],                        # lowest slot
                 [self.BAD, dev_id(0, 0)]],             # 1 free, then GPU 0
           "preferred allocations")
        code, msg = rpc_error(lambda: self.plugin.call(
            "GetPreferredAllocation", pb.PreferredAllocationRequest(
                container_requests=[C(available_deviceIDs=g1,
                                      allocation_size=3)]),
            pb.PreferredAllocationResponse))
        eq(code, grpc.StatusCode.INVALID_ARGUMENT, "too large a size")
        check("allocation_size 3" in msg, "message: %r" % msg)
        # Ids the plugin does not advertise, offered or insisted on.
        for kw in ({"available_deviceIDs": g1 + ["GPU-nope::0"]},
                   {"available_deviceIDs": g1,
                    "must_include_deviceIDs": ["GPU-nope::1"]}):
            code, msg = rpc_error(lambda: self.plugin.call(
                "GetPreferredAllocation", pb.PreferredAllocationRequest(
                    container_requests=[C(allocation_size=1, **kw)]),
                pb.PreferredAllocationResponse))
            eq(code, grpc.StatusCode.INVALID_ARGUMENT, "unadvertised id")
            check("GPU-nope::" in msg and "does not advertise" in msg,
                  "message names the id: %r" % msg)

    def pre_start(self):
        r = self.plugin.call("PreStartContainer", pb.PreStartContainerRequest(
            devices_ids=[dev_id(0, 0)]), pb.PreStartContainerResponse)
        eq(r.ByteSize(), 0, "PreStartContainerResponse size")

    def malformed_input(self):
        # Garbage instead of the HTTP/2 preface: that connection is closed.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(self.psock)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)))
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
            check(len(got) < 65536, "server keeps talking to garbage")
        s.close()
        # A valid preface, then a broken frame.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(self.psock)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                  b"\x00\x00\x04\x01\x00\x00\x00\x00\x01" + b"\xff" * 64)
        while s.recv(4096):
            pass
        s.close()
        bad = pb.Empty
        # A body that is not an AllocateRequest.
        code, msg = rpc_error(lambda: self.plugin.call(
            "Allocate", b"\x0a\xff\xff\xff\xff\x0f", bad, raw=True))
        eq(code, grpc.StatusCode.INVALID_ARGUMENT, "bad protobuf status")
        check("AllocateRequest" in msg, "message: %r" % msg)
        # A compressed message (a valid request, compressible enough that
        # grpc does compress it).
        big = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[dev_id(0, 0)] * 64)])
        code, msg = rpc_error(lambda: self.plugin.call(
            "Allocate", big, pb.AllocateResponse,
            compression=grpc.Compression.Gzip))
        eq(code, grpc.StatusCode.INVALID_ARGUMENT, "compressed status")
        check("compressed" in msg, "message: %r" % msg)
        # Over the 4 MiB limit.
        code, msg = rpc_error(lambda: self.plugin.call(
            "Allocate", b"\x00" * (5 << 20), bad, raw=True))
        eq(code, grpc.StatusCode.INVALID_ARGUMENT, "oversize status")
        check("limit" in msg, "message: %r" % msg)
        # Still serving, the open stream too.
        ids = [dev_id(1, 0)]
        expect_answer(self.plugin.allocate([ids]).container_responses[0], ids)
        eq(self.driver.cmd("unhealthy " + ids[0]), "ok", "driver")
        upd = next_with_timeout(self.watch, 2)
        eq({d.ID: d.health for d in upd.devices}[ids[0]], "Unhealthy",
           "update after malformed input")
        eq(self.driver.cmd("healthy " + ids[0]), "ok", "driver")
        next_with_timeout(self.watch, 2)

    def kubelet_restart(self):
        # kubelet.sock made anew, our socket left alone.
        for drop_plugin_socket in (False, True):
            self.kubelet.stop()
            if drop_plugin_socket:  # as a real kubelet does on restart
                os.unlink(self.psock)
            time.sleep(0.4)
            self.kubelet = Kubelet(self.ksock)
            self.kubelet.start()
            check(self.kubelet.wait_registers(1, 1.0),
                  "no Register within 1 s of kubelet.sock coming back "
                  "(plugin socket removed: %s)" % drop_plugin_socket)
            t, req = self.kubelet.registers[0]
            eq(req.endpoint, ENDPOINT, "endpoint after restart")
            check(os.path.exists(self.psock), "plugin socket is back")
            p = Plugin(self.psock)
            w = p.watch()
            eq(len(next_with_timeout(w, 3).devices), len(self.all_ids),
               "ListAndWatch after the restart")
            w.cancel()
            p.close()
        self.plugin.close()
        self.plugin = Plugin(self.psock)
        eq(self.driver.wait_regs(3), "3", "gf__dp_registrations")

    def plugin_restart(self):
        w = Plugin(self.psock)
        watch = w.watch()
        next_with_timeout(watch, 3)
        eq(self.driver.quit(), 0, "dp_driver exit status (leaks fail it)")
        check(next_with_timeout(watch, 3) is None,
              "the stream ends when the plugin stops")
        eq(watch.code(), grpc.StatusCode.OK, "stream status at stop")
        check(not os.path.exists(self.psock), "socket removed at stop")
        w.close()
        self.start_driver()
        check(self.kubelet.wait_registers(2, 2.0),
              "no Register within 2 s of the plugin restarting")
        self.plugin.close()
        self.plugin = Plugin(self.psock)
        self.options()
        ids = [dev_id(0, 1)]
        expect_answer(self.plugin.allocate([ids]).container_responses[0], ids)

    def run(self):
        order = [self.registers_after_kubelet_appears, self.options,
                 self.list_and_watch, self.allocate,
                 self.concurrent_allocates, self.allocate_failure,
                 self.unknown_method, self.preferred_allocation,
                 self.pre_start, self.malformed_input,
                 self.waiting_allocate_blocks_nothing,
                 self.idle_connections_do_not_lock_out_kubelet,
                 self.watches_do_not_lock_out_kubelet,
                 self.kubelet_restart,
                 self.plugin_restart, self.stop_while_allocate_waits]
        failed = 0
        try:
            for sc in order:
                t = time.monotonic()
                try:
                    sc()
                    print("ok   %-34s %.2f s" % (sc.__name__,
                                                 time.monotonic() - t))
                except Exception:  # noqa: BLE001 - reported
                    failed += 1
                    print("FAIL %s" % sc.__name__)
                    traceback.print_exc(file=sys.stdout)
                    if self.driver is None or self.driver.p.poll() is not \
                            None or sc == order[0]:
                        break
                sys.stdout.flush()
            if self.driver and self.driver.p.poll() is None:
                rc = self.driver.quit()
                if rc != 0:
                    failed += 1
                    print("FAIL dp_driver exited %d" % rc)
        finally:
            if self.plugin:
                self.plugin.close()
            if self.driver:
                self.driver.kill()
            if self.kubelet.server:
                self.kubelet.stop()
            shutil.rmtree(self.dir, ignore_errors=True)
        print("%d scenario(s) failed" % failed if failed else "all passed")
        return 1 if failed else 0


def vmrss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def bench(driver_path, n, gpus, slots):
    d = tempfile.mkdtemp(prefix="gfdpb")
    ksock = os.path.join(d, "kubelet.sock")
    k = Kubelet(ksock)
    k.start()
    drv = Driver(driver_path, d, ksock, gpus, slots)
    try:
        check(k.wait_registers(1, 2.0), "no Register")
        p = Plugin(os.path.join(d, ENDPOINT))
        w = p.watch()
        first = next_with_timeout(w, 3)
        ids = [dev_id(g, s) for g in range(gpus) for s in range(slots)]
        eq(len(first.devices), len(ids), "devices")
        rng = random.Random(42)
        for _ in range(100):  # warm-up: connection, caches
            p.allocate([[rng.choice(ids)]])
        lat = []
        for _ in range(n):
            req = [[rng.choice(ids)]]
            t = time.perf_counter_ns()
            r = p.allocate(req)
            lat.append((time.perf_counter_ns() - t) / 1000.0)
            check(len(r.container_responses) == 1, "answer")
        lat.sort()
        base = []  # the same path with no work on the server's side
        for _ in range(n):
            t = time.perf_counter_ns()
            p.call("GetDevicePluginOptions", pb.Empty(),
                   pb.DevicePluginOptions)
            base.append((time.perf_counter_ns() - t) / 1000.0)
        base.sort()
        rss = vmrss_kib(drv.p.pid)
        print("devices %d (%d GPUs x %d slots), Allocate calls %d" %
              (len(ids), gpus, slots, n))
        print("Allocate latency us: median %.1f  p99 %.1f  min %.1f  max %.1f"
              % (statistics.median(lat), lat[int(0.99 * (n - 1))], lat[0],
                 lat[-1]))
        print("GetDevicePluginOptions latency us (client + transport): "
              "median %.1f  p99 %.1f" % (statistics.median(base),
                                         base[int(0.99 * (n - 1))]))
        print("plugin VmRSS: %d KiB (ListAndWatch stream open)" % rss)
        w.cancel()
        p.close()
        eq(drv.quit(), 0, "dp_driver exit status")
    finally:
        drv.kill()
        k.stop()
        shutil.rmtree(d, ignore_errors=True)
    return 0


def hold_watches(sock, n):
    """A process that holds n ListAndWatch streams, each on a connection of
    its own (what a runaway monitoring agent, or an attacker with access to
    the socket, does).  Prints "held K" (K: how many got a first list)."""
    held = []
    got = 0
    for _ in range(n):
        p = Plugin(sock, own_connection=True)
        w = p.watch()
        try:
            next_with_timeout(w, 5)
            got += 1
        except Exception:  # noqa: BLE001 - closed or refused: not held
            pass
        held.append((p, w))
    print("held %d" % got, flush=True)
    sys.stdin.read()
    return 0


class Holder:
    """hold_watches in a child process (its own pid, as the server sees it)."""

    def __init__(self, driver_path, pb_dir, sock, n):
        self.p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--driver",
             driver_path, "--pb", pb_dir, "--hold-watches", str(n),
             "--sock", sock], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        line = self.p.stdout.readline().strip()
        check(line.startswith("held "), "watch holder: %r" % line)
        self.held = int(line.split()[1])

    def stop(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def main():
    global pb
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True)
    ap.add_argument("--pb", required=True)
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--hold-watches", type=int, default=0,
                    help="another process: open N ListAndWatch connections "
                    "on --sock, print how many got a list, hold until stdin "
                    "closes")
    ap.add_argument("--sock")
    a = ap.parse_args()
    sys.path.insert(0, a.pb)
    from deviceplugin.v1beta1 import api_pb2
    pb = api_pb2
    if a.hold_watches:
        return hold_watches(a.sock, a.hold_watches)
    if a.bench:
        return bench(a.driver, a.bench, a.gpus, a.slots)
    return Scenarios(a.driver, a.pb).run()


if __name__ == "__main__":
    sys.exit(main())
