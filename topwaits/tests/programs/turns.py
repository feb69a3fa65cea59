"""Four threads take one threading.Lock in turn and each sleeps 2 ms inside it
(in nap, called by work_locked, the function that holds the lock). Whoever
holds it, the others wait behind the same sleep. Prints "ready" once they run."""
import threading, time

lock = threading.Lock()

def nap():
    time.sleep(0.002)

def work_locked():
    with lock:
        nap()

def worker():
    while True:
        work_locked()
        sum(range(200))

for _ in range(4):
    threading.Thread(target=worker, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
