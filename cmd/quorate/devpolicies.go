package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// loadDevPolicies applies file to a fresh dev cluster (policy version 0),
// so that make run answers descriptor checks from the start. A cluster
// that already has policies (its data kept from an earlier run) keeps its
// own: the example would overwrite what the user changed.
func loadDevPolicies(ctx context.Context, addr, file string, creds security.Dev) (string, error) {
	doc, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--policies: %w", err)
	}
	ca, err := client.WithCAFile(creds.CA())
	if err != nil {
		return "", err
	}
	tok, err := creds.Token("operator")
	if err != nil {
		return "", err
	}
	conn, err := grpc.NewClient(addr, ca, client.WithToken(tok))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	admin := pb.NewAdminClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, err := admin.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return "", fmt.Errorf("--policies: %w", err)
	}
	if st.GetPolicyVersion() > 0 {
		return fmt.Sprintf("policies: kept the cluster's own (version %d, %d policies); %s not applied", st.GetPolicyVersion(), st.GetPolicies(), file), nil
	}
	resp, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: string(doc), SourceName: file})
	if err != nil {
		return "", fmt.Errorf("--policies %s: %w", file, err)
	}
	return fmt.Sprintf("policies: applied %d from %s (version %d): %s", len(resp.GetAdded()), file, resp.GetVersion(), strings.Join(resp.GetAdded(), ", ")), nil
}
