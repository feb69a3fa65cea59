// Goroutines for the goroutine tests. "mutex N SECS TRACE": N goroutines take
// turns on one sync.Mutex and sleep 2 ms while they hold it, with the
// runtime's own execution trace written to TRACE over the first SECS seconds
// (none when TRACE is "-"). "chan": a producer hands a value to a consumer
// over a channel every 2 ms, from a function of its own. "spawn": a server's
// way, a goroutine per request: each sleeps 1 ms and hands its answer back
// over a channel, thousands a second, every one with a new goroutine id.
package main

import (
	"fmt"
	"os"
	"runtime/trace"
	"strconv"
	"sync"
	"time"
)

var mu sync.Mutex

//go:noinline
func twSleepHoldingTheLock() { time.Sleep(2 * time.Millisecond) }

//go:noinline
func twHandle() {
	mu.Lock()
	twSleepHoldingTheLock()
	mu.Unlock()
}

//go:noinline
func twProduce(c chan<- int, i int) {
	time.Sleep(2 * time.Millisecond)
	c <- i
}

//go:noinline
func twConsume(c <-chan int) int { return <-c }

//go:noinline
func twRequest(c chan<- int, i int) {
	time.Sleep(time.Millisecond)
	c <- i
}

func main() {
	switch os.Args[1] {
	case "mutex":
		n, _ := strconv.Atoi(os.Args[2])
		secs, _ := strconv.Atoi(os.Args[3])
		if os.Args[4] != "-" {
			f, err := os.Create(os.Args[4])
			if err != nil {
				panic(err)
			}
			if err := trace.Start(f); err != nil {
				panic(err)
			}
			go func() {
				time.Sleep(time.Duration(secs) * time.Second)
				trace.Stop()
				f.Close()
				fmt.Println("traced")
			}()
		}
		for i := 0; i < n; i++ {
			go func() {
				for {
					twHandle()
				}
			}()
		}
	case "chan":
		c := make(chan int)
		go func() {
			for i := 0; ; i++ {
				twProduce(c, i)
			}
		}()
		go func() {
			for {
				twConsume(c)
			}
		}()
	case "spawn":
		go func() {
			for i := 0; ; i++ {
				c := make(chan int)
				go twRequest(c, i)
				twConsume(c)
			}
		}()
	}
	fmt.Println("ready")
	select {}
}
