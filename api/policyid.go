package api

import (
	"go.yaml.in/yaml/v3"
)

// samePolicyID checks that doc, YAML or JSON (JSON is YAML), is one policy
// object whose policy_id is id. Everything else about the policy is the
// node's to judge.
func samePolicyID(doc []byte, id string) *fieldError {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return badField("body", "%v", err)
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return badField("body", "want one policy object (a document of several goes to POST /v1/admin/policies/apply)")
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k, v := m.Content[i], m.Content[i+1]; k.Value == "policy_id" {
			if v.Kind != yaml.ScalarNode || v.Value != id {
				return badField("policy_id", "%q (line %d) is not the policy the path names, %q", v.Value, v.Line, id)
			}
			return nil
		}
	}
	return badField("policy_id", "required, and equal to the path's %q", id)
}
