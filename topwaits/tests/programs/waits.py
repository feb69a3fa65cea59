"""A Python workload for topwaits' tests: threads that sleep (two functions
deep), read a pipe, and take a contended threading.Lock. Prints "ready" once
they run."""
import os, threading, time

lock = threading.Lock()
r, w = os.pipe()

def sleeper_inner():
    time.sleep(0.01)

def sleeper():
    while True:
        sleeper_inner()

def pipe_reader():
    while True:
        os.read(r, 1)

def pipe_writer():
    while True:
        time.sleep(0.005)
        os.write(w, b"x")

def lock_taker():
    while True:
        with lock:
            pass

def lock_holder():
    while True:
        with lock:
            time.sleep(0.02)
        time.sleep(0.001)

for f in (sleeper, pipe_reader, pipe_writer, lock_taker, lock_holder):
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
