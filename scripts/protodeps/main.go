// Command protodeps writes, to stdout, a FileDescriptorSet of the proto
// files that rpc/ imports from outside this repository and outside
// protoc's own well-known types: google/rpc/status.proto (and its
// google/protobuf/any.proto). They come from the Go modules pinned in
// go.mod, so scripts/proto.sh needs no copy of googleapis: it passes the
// set to protoc with --descriptor_set_in, and the generated code imports
// the same genproto package the descriptors came from.
package main

import (
	"fmt"
	"os"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
)

func main() {
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(anypb.File_google_protobuf_any_proto),
		protodesc.ToFileDescriptorProto(status.File_google_rpc_status_proto),
	}}
	b, err := proto.Marshal(set)
	if err == nil {
		_, err = os.Stdout.Write(b)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "protodeps:", err)
		os.Exit(1)
	}
}
