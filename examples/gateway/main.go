// Command gateway is a small HTTP service protected by quorate's Go
// middleware with the limiter embedded in the process: leased policies
// are decided in-process from the gateway's own leases, strict ones in the
// cluster. Against `make run`, from the repository root:
//
//	go run ./examples/gateway
//
// and see README.md beside this file.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/quorate/quorate/client"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "where the service listens")
	nodes := flag.String("nodes", "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403", "gRPC addresses of quorate nodes (comma-separated)")
	creds := flag.String("credentials", "data/credentials", "directory holding ca.crt and gateway.token (make run writes them)")
	failClosed := flag.Bool("fail-closed", false, "answer 503 when no decision can be made at all (default: let requests through)")
	holder := flag.String("holder", "", "this instance's name among gateways sharing the token (default: host name and pid)")
	flag.Parse()
	if err := run(*listen, strings.Split(*nodes, ","), *creds, *holder, *failClosed); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(listen string, nodes []string, creds, holder string, failClosed bool) error {
	ca, err := client.WithCAFile(filepath.Join(creds, "ca.crt"))
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(creds, "gateway.token"))
	if err != nil {
		return fmt.Errorf("the gateway token (a token with the lease scope): %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := client.DialCluster(dctx, nodes, client.WithDialOptions(ca, client.WithToken(strings.TrimSpace(string(tok)))))
	if err != nil {
		return err
	}
	defer cl.Close()
	lim, err := client.NewEmbedded(dctx, cl, client.EmbeddedConfig{Holder: holder})
	if err != nil {
		return err
	}
	defer lim.Close() // gives the leases back
	api := http.NewServeMux()
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s, request %s\n", r.Header.Get("X-Tenant-Id"), r.Header.Get("X-Request-Id"))
	})
	limited := client.Middleware(lim, client.MiddlewareConfig{FailClosed: failClosed})(api)
	srv := &http.Server{Addr: listen, Handler: limited, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("gateway: listening on http://%s, policy set version %d", listen, lim.Policies().Version())
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}
