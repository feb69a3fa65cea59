// Four Java threads take turns on one monitor and sleep 2 ms inside it, as
// handlers serialized on a shared lock do: one sleeps while the others wait
// to enter. Run without flags.
public class Turns {
    static final Object LOCK = new Object();

    static void sleepHoldingTheLock() throws InterruptedException {
        Thread.sleep(2);
    }

    static void handle() throws InterruptedException {
        synchronized (LOCK) {
            sleepHoldingTheLock();
        }
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i < 4; i++) {
            Thread t = new Thread(() -> {
                try {
                    for (;;) handle();
                } catch (InterruptedException e) {
                    return;
                }
            }, "worker-" + i);
            t.setDaemon(true);
            t.start();
        }
        System.out.println("ready");
        Thread.sleep(Long.MAX_VALUE);
    }
}
