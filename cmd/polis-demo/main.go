// Command polis-demo is the tiny workload of Polis' examples and tests: a
// static HTTP server that answers every request with the Pod's name (its
// hostname) and logs each request on standard output, so that kubectl logs
// has something to show. launch/demoimage packs it as an OCI image.
//
//	polis-demo [--listen :8080]   serve
//	polis-demo get URL            print what URL answers (for kubectl exec:
//	                              the image holds no shell and no curl)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "get" {
		if err := get(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "polis-demo get:", err)
			os.Exit(1)
		}
		return
	}
	listen := flag.String("listen", ":8080", "the address to serve HTTP on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *listen); err != nil {
		log.Fatal(err)
	}
}

// serve answers until ctx ends, then stops gracefully (a Pod's SIGTERM).
func serve(ctx context.Context, addr string) error {
	host, _ := os.Hostname()
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s %s from %s", r.Method, r.URL.Path, r.RemoteAddr)
		fmt.Fprintf(w, "hello from %s\n", host)
	})}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("polis-demo on %s serving on %s", host, addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Printf("stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// get prints the body of GET URL.
func get(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: polis-demo get URL")
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(args[0])
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", args[0], resp.Status)
	}
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}
