package client_test

import (
	"fmt"

	"github.com/quorate/quorate/client"
)

func ExampleParseAlgorithm() {
	alg, err := client.ParseAlgorithm("gcra")
	if err != nil {
		panic(err)
	}
	fmt.Println(alg, client.AlgorithmName(alg))

	_, err = client.ParseAlgorithm("leaky")
	fmt.Println(err)
	// Output:
	// ALGORITHM_GCRA gcra
	// client: unknown algorithm "leaky" (want one of token_bucket, gcra, sliding_window, fixed_window, sliding_log, leaky_bucket_policing, leaky_bucket_shaping)
}
