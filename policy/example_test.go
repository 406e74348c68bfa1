package policy

import (
	"bytes"
	"os"
	"testing"
)

// TestExampleIsThePlans: examples/policies.yaml, which the README shows and
// make run loads, is the worked example the tests here exercise.
func TestExampleIsThePlans(t *testing.T) {
	ex, err := os.ReadFile("../examples/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plans, err := os.ReadFile("testdata/plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ex, plans) {
		t.Fatal("examples/policies.yaml differs from policy/testdata/plans.yaml: copy one over the other")
	}
	ps, err := Parse("examples/policies.yaml", ex)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(ps, nil, 1); err != nil {
		t.Fatal(err)
	}
}
