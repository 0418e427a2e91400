"""Attacks run inside a Landlock sandbox (isolation="landlock"), shared by the root caller's
tests and the unprivileged caller's driver (test_landlock.py): one program, one JSON request
on stdin, one JSON line out, so both callers are held to the same standard.

Request keys (all optional): read, write (paths), environ (pids whose /proc/PID/environ to
read), kill (pids to SIGCONT: harmless, but refused out of the sandbox), tcp (a loopback port
to connect to), udp (an address to connect a UDP socket to: sends nothing), unix (a named
socket's path), abstract (an abstract socket's name), symlink (a host path to link to from the
workdir, then read through).  Each result is "ok" or the errno's name.
"""

ATTACKS = r'''
import errno, json, os, signal, socket, sys
req = json.loads(sys.stdin.read())
def en(e): return errno.errorcode.get(e.errno, str(e)) if isinstance(e, OSError) else type(e).__name__
def attempt(fn):
    try:
        fn()
        return "ok"
    except Exception as e:
        return en(e)
out = {"uid": os.getuid(), "pid": os.getpid(), "cwd": os.getcwd()}
def rd(p):
    with open(p, "rb") as f: f.read(1)
def wr(p):
    with open(p, "ab") as f: f.write(b"x")
out["read"] = {p: attempt(lambda p=p: rd(p)) for p in req.get("read", [])}
out["write"] = {p: attempt(lambda p=p: wr(p)) for p in req.get("write", [])}
out["environ"] = {str(p): attempt(lambda p=p: rd(f"/proc/{p}/environ")) for p in req.get("environ", [])}
out["kill"] = {str(p): attempt(lambda p=p: os.kill(p, signal.SIGCONT)) for p in req.get("kill", [])}
def tcp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.settimeout(3); s.connect(("127.0.0.1", port)); s.close()
if "tcp" in req: out["tcp"] = attempt(lambda: tcp(req["tcp"]))
def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((addr, 53)); s.close()
if "udp" in req: out["udp"] = attempt(lambda: udp(req["udp"]))
def unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(3); s.connect(path); s.close()
if "unix" in req: out["unix"] = attempt(lambda: unix(req["unix"]))
if "abstract" in req: out["abstract"] = attempt(lambda: unix("\0" + req["abstract"]))
if "symlink" in req:
    os.symlink(req["symlink"], "escape")
    out["symlink"] = attempt(lambda: rd("escape"))
print(json.dumps(out))
'''
