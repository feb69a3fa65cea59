// Two threads take two monitors in opposite orders and deadlock: each holds
// one and waits to enter the other, as jstack's "Java-level deadlock" shows.
// Each monitor's object has a class of its own, so that reports can be told
// which is which. Run without flags; prints "ready" once both are stuck.
import java.util.concurrent.CountDownLatch;

public class Deadlock {
    static final class First {}

    static final class Second {}

    static final Object FIRST = new First();
    static final Object SECOND = new Second();
    static final CountDownLatch BOTH_HELD = new CountDownLatch(2);

    static void takeBoth(Object held, Object wanted) {
        synchronized (held) {
            BOTH_HELD.countDown();
            try {
                BOTH_HELD.await();
            } catch (InterruptedException e) {
                return;
            }
            synchronized (wanted) {
                System.out.println("never: the other thread holds it");
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Thread a = new Thread(() -> takeBoth(FIRST, SECOND), "taker-1");
        Thread b = new Thread(() -> takeBoth(SECOND, FIRST), "taker-2");
        a.setDaemon(true);
        b.setDaemon(true);
        a.start();
        b.start();
        // Both are in their second synchronized once they block there.
        while (a.getState() != Thread.State.BLOCKED || b.getState() != Thread.State.BLOCKED) {
            Thread.sleep(10);
        }
        System.out.println("ready");
        Thread.sleep(Long.MAX_VALUE);
    }
}
