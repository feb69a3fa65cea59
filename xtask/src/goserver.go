// The bench's Go server: "serve PORT [TRACE]" answers HTTP requests by handing
// each to a pool of worker goroutines over a channel and waiting for the
// answer (with TRACE, under the runtime's own execution tracer, written
// there); "load PORT CONNS SECS" keeps CONNS connections busy for SECS seconds
// and prints the requests per second.
package main

import (
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"runtime/trace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

type job struct {
	data  []byte
	reply chan uint32
}

func work(b []byte) uint32 {
	h := fnv.New32a()
	for i := 0; i < 16; i++ {
		h.Write(b)
	}
	return h.Sum32()
}

func serve(port string) {
	if len(os.Args) > 3 {
		f, err := os.Create(os.Args[3])
		if err != nil {
			panic(err)
		}
		if err := trace.Start(f); err != nil {
			panic(err)
		}
	}
	jobs := make(chan job)
	for i := 0; i < 4; i++ {
		go func() {
			for j := range jobs {
				j.reply <- work(j.data)
			}
		}()
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply := make(chan uint32, 1)
		jobs <- job{[]byte(r.URL.Path), reply}
		fmt.Fprintf(w, "%d\n", <-reply)
	})
	fmt.Println("ready")
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		panic(err)
	}
}

func load(port string, conns int, secs int) {
	url := "http://127.0.0.1:" + port + "/item"
	end := time.Now().Add(time.Duration(secs) * time.Second)
	var n int64
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for time.Now().Before(end) {
				resp, err := c.Get(url)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				atomic.AddInt64(&n, 1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%.0f\n", float64(n)/float64(secs))
}

func main() {
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2])
	case "load":
		conns, _ := strconv.Atoi(os.Args[3])
		secs, _ := strconv.Atoi(os.Args[4])
		load(os.Args[2], conns, secs)
	}
}
