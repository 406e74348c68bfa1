package client_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// A Cluster learns the cluster from any of its nodes and sends each strict
// check to the leader of its shard.
func ExampleDialCluster() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.DialCluster(ctx, []string{"127.0.0.1:7401", "127.0.0.1:7402"})
	if err != nil {
		fmt.Println(err) // no seed answered
		return
	}
	defer c.Close()
	resp, err := c.Check(ctx, &quoratev1.CheckRequest{
		Items: []*quoratev1.Item{{
			Name: "api", Key: "user:42", Algorithm: quoratev1.Algorithm_ALGORITHM_TOKEN_BUCKET,
			Limit: 100, Period: durationpb.New(time.Minute),
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetDecision())
}
