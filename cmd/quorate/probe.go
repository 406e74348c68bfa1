package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// probeBodyMax bounds how much of a failing answer probe prints: enough for
// /readyz's reason, never a whole page.
const probeBodyMax = 512

// probeCmd is a health check for images without curl (distroless): Docker
// and Compose healthchecks run the binary itself.
func (a *app) probeCmd() *cobra.Command {
	var (
		rawURL  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "probe --url URL",
		Short: "GET a URL and succeed on a 2xx answer (a container healthcheck)",
		Long: `GET --url and exit 0 if the answer is 2xx, 1 otherwise (printing the status
and the start of the body), 2 for bad flags. It is the healthcheck of an image
without curl: point it at a node's /readyz or /healthz, which need no token.`,
		Example: `  quorate probe --url http://127.0.0.1:7501/readyz`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := url.Parse(rawURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError(fmt.Errorf("--url %q: want an http:// or https:// URL with a host", rawURL))
			}
			if timeout <= 0 {
				return usageError(fmt.Errorf("--timeout %v: must be positive", timeout))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := probe(ctx, u.String()); err != nil {
				return failure(err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rawURL, "url", "", "URL to GET, e.g. http://127.0.0.1:7501/readyz (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for the answer")
	return cmd
}

// probe GETs url and returns nil for a 2xx answer.
func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("probe %s: no answer within --timeout", url)
		}
		return fmt.Errorf("probe %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyMax))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
