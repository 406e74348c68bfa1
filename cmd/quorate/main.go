// Command quorate is the one quorate binary: a node (agent), a local
// development cluster (dev), and the operator and client tools (check,
// status). Run "quorate help" for the commands.
//
// Exit status: 0 on success, 1 when a command fails (for check: the request
// was denied), 2 for bad flags or arguments (for check: any error).
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(newApp().run(context.Background(), os.Args[1:]))
}
