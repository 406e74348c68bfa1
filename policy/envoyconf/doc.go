// Package envoyconf turns the Envoy rate limit service's YAML configuration
// (github.com/envoyproxy/ratelimit) into quorate policies, and finds, for a
// request's descriptor, the one policy the reference service would apply.
//
// # The mapping
//
// Every node of an Envoy configuration tree that decides something becomes
// one policy in layer CUSTOM:
//
//   - a node with rate_limit {requests_per_unit: N > 0, unit: U}: kind
//     OVERRIDE, FIXED_WINDOW (by default) of N per U, windows aligned to the
//     Unix epoch as the reference's are (a month is 30 days, a year 365);
//     mode SHADOW if the node has shadow_mode;
//   - requests_per_unit: 0 (every request over the limit): a BLOCK policy;
//   - unlimited: true, and a leaf without rate_limit (which stops the match
//     with no limit): a disabled BLOCK policy, a marker that decides nothing
//     but keeps the node in the tree, so that the match stops there as the
//     reference's does.
//
// Each policy's scope is one exact custom descriptor, custom.envoy.node
// equal to its own policy id, and it counts by custom.envoy.key, the
// request's entries (key=value pairs, escaped and joined with '&'; a
// SHA-256 digest when longer than a descriptor value may be). So a node
// with a key and no value, or a wildcard value, counts each value
// separately, as the reference's cache keys do, and two policies can never
// match the same request: quorate's resolution (one policy per layer)
// applies exactly the policy named.
//
// Which node a request's descriptor names is the reference's walk, done by
// Index.Match from the policy set itself: the domain, then per entry the
// child with that key and value, else the first wildcard child (in the
// file's order) whose pattern matches, else the child with that key and no
// value; a limit applies only if the walk uses every entry and ends on a
// node with a limit. The walk needs the tree, so each policy carries its
// node in its description (`envoy:` and a JSON object: domain, path with
// each step's order among its siblings, name, replaces, unit and
// requests_per_unit). Imported policies are replicated and versioned like
// any other; `quorate policy import --envoy` keeps them in step with the
// file.
//
// detailed_metric, value_to_metric and metadata are accepted and ignored
// (they change the reference's statistics and dynamic metadata only);
// quota_mode and share_threshold are refused.
package envoyconf
