// A producer hands an item to a consumer every 5 ms through one object's
// monitor: the consumer waits in Object.wait for each notify. Run without
// flags.
public class Handoff {
    static final Object QUEUE = new Object();
    static int items = 0;

    static void consume() throws InterruptedException {
        synchronized (QUEUE) {
            while (items == 0) {
                QUEUE.wait();
            }
            items--;
        }
    }

    public static void main(String[] args) throws Exception {
        Thread consumer = new Thread(() -> {
            try {
                for (;;) consume();
            } catch (InterruptedException e) {
                return;
            }
        }, "consumer");
        consumer.setDaemon(true);
        consumer.start();
        System.out.println("ready");
        for (;;) {
            Thread.sleep(5);
            synchronized (QUEUE) {
                items++;
                QUEUE.notify();
            }
        }
    }
}
