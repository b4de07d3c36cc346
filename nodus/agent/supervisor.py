"""The program that supervises a bubblewrap sandbox from the inside, as its pid 2 (source text).

``nodus.agent.bubblewrap`` runs it with the agent's own interpreter (``-I -S -c SOURCE``), so it
uses only the standard library and must not import anything of Nodus. It reads the attempt's spec
(argv, environments, sidecars and their pipes, the egress forwarder) as JSON from the control fd,
starts the sidecars in order and waits until each is ready, starts the egress forwarder when there
is an allow list, runs the program, and reports every step on the status fd, one line each. After
the program ends it reports its exit, then stops the sidecars (SIGTERM, SIGKILL 5 s later).
"""

from __future__ import annotations

# Runs inside the sandbox as pid 2: argv[1] is the control fd (JSON spec), argv[2] the status fd.
# Children are started with subprocess (fork and exec in C): the egress forwarder's threads make a
# Python-level fork unsafe. Status lines: "sidecar <name> started <pid>|ready|failed <why>|exited <rc>",
# then "started <pid>" and "exit <returncode>", or "failed <why>" when the program cannot be executed.
SOURCE = """\
import json, os, signal, socket, subprocess, sys, threading, time
control, status = int(sys.argv[1]), int(sys.argv[2])
with os.fdopen(control, "rb") as source:
    spec = json.loads(source.read())
os.set_inheritable(status, False)
def report(line):
    os.write(status, line.encode("utf-8", "replace") + b"\\n")
# A handler rather than SIG_IGN: exec resets handlers, so the children get the default actions back.
for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, lambda *_: None)

def pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

def forward(client):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(spec["egress_socket"])
    except OSError:
        client.close()
        upstream.close()
        return
    upload = threading.Thread(target=pump, args=(client, upstream), daemon=True)
    upload.start()
    pump(upstream, client)
    try:
        client.shutdown(socket.SHUT_RD)  # the proxy has finished: end the upload too
    except OSError:
        pass
    upload.join()
    client.close()
    upstream.close()

def serve(listener):
    while True:
        client, _ = listener.accept()
        threading.Thread(target=forward, args=(client,), daemon=True).start()

if spec["egress_socket"]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", spec["proxy_port"]))
    listener.listen(128)
    threading.Thread(target=serve, args=(listener,), daemon=True).start()

def described(returncode):
    if returncode < 0:
        return "was killed by signal %d" % -returncode
    return "exited with code %d" % returncode

sidecars = []
def reap(proc, flags):
    if proc.returncode is None:
        pid, wait_status = os.waitpid(proc.pid, flags)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(wait_status)
    return proc.returncode

def stop_sidecars():
    running = [proc for _, proc in sidecars if reap(proc, os.WNOHANG) is None]
    for proc in running:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(reap(proc, os.WNOHANG) is None for proc in running):
        time.sleep(0.02)
    for proc in running:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            reap(proc, 0)

def fail(line):
    report(line)
    stop_sidecars()
    sys.exit(0)

def start(argv, env, **streams):
    try:
        return subprocess.Popen(argv, env=env, **streams), None
    except (OSError, ValueError) as error:
        return None, str(getattr(error, "strerror", None) or error)

for sidecar in spec["sidecars"]:
    name = sidecar["name"]
    proc, why = start(sidecar["argv"], sidecar["env"], stdout=sidecar["stdout"], stderr=sidecar["stderr"],
                      start_new_session=True)
    os.close(sidecar["stdout"])
    os.close(sidecar["stderr"])
    if proc is None:
        fail("sidecar %s failed cannot run %r: %s" % (name, sidecar["argv"][0], why))
    sidecars.append((name, proc))
    report("sidecar %s started %d" % (name, proc.pid))
    began = time.monotonic()
    while not os.path.exists(sidecar["env"]["NODUS_READY_FILE"]):
        if reap(proc, os.WNOHANG) is not None:
            fail("sidecar %s failed %s before it was ready" % (name, described(proc.returncode)))
        waited = time.monotonic() - began
        if waited >= sidecar["startup_timeout"]:
            fail("sidecar %s failed was not ready within %g s" % (name, sidecar["startup_timeout"]))
        if waited >= 2:
            break
        time.sleep(0.02)
    report("sidecar %s ready" % name)

main, why = start(spec["argv"], spec["env"])
if main is None:
    fail("failed " + why)
report("started %d" % main.pid)
while main.returncode is None:
    pid, wait_status = os.waitpid(-1, 0)
    for name, proc in [("", main), *sidecars]:
        if proc.pid == pid:
            proc.returncode = os.waitstatus_to_exitcode(wait_status)
            if proc is not main:
                report("sidecar %s ended %s" % (name, described(proc.returncode)))
report("exit %d" % main.returncode)
stop_sidecars()
"""
