"""CPython threads for TestGILWaits: two spin pure Python code at once (each
waits for the interpreter lock while the other holds it) and one waits on a
threading.Lock that another thread holds across a sleep (a lock of the
program's). Prints "ready", waits for "go", prints each thread's "tid
<label> <tid>" and the address of _PyRuntime ("addr <a>"), "done", and
waits for its input to end."""
import ctypes
import sys
import threading
import time

SPIN = 0.6
OUT = threading.Lock()


def say(line):
    with OUT:  # print writes the line and its newline apart
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def spin(label):
    say("tid %s %d" % (label, threading.get_native_id()))
    end = time.monotonic() + SPIN
    x = 1
    while time.monotonic() < end:
        for _ in range(200):
            x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF


LOCK = threading.Lock()
HELD = threading.Event()


def holder():
    with LOCK:
        HELD.set()
        time.sleep(0.4)


def waiter():
    say("tid waiter %d" % threading.get_native_id())
    HELD.wait()
    with LOCK:
        pass


say("ready")
sys.stdin.readline()
runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
say("addr %d" % runtime)
threads = [threading.Thread(target=spin, args=(l,)) for l in ("spin1", "spin2")]
threads += [threading.Thread(target=holder), threading.Thread(target=waiter)]
for t in threads:
    t.start()
for t in threads:
    t.join()
say("done")
sys.stdin.readline()  # until the test is done with the process
