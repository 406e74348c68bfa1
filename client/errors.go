package client

import "errors"

// Errors returned by this package. The Parse functions wrap theirs with the
// rejected input and the accepted names; test them with errors.Is. Errors from
// the server are gRPC status errors and are returned as they are.
var (
	// ErrUnknownAlgorithm: the name is not one of AlgorithmNames().
	ErrUnknownAlgorithm = errors.New("client: unknown algorithm")
	// ErrUnknownMode: the name is not strict or leased.
	ErrUnknownMode = errors.New("client: unknown mode")
	// ErrUnknownFailMode: the name is not open or closed.
	ErrUnknownFailMode = errors.New("client: unknown fail mode")
	// ErrNotServing: the node's health service answered, with a status other
	// than SERVING.
	ErrNotServing = errors.New("client: node not serving")
)
