package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// descriptorSetters set a descriptor of a check by the proto's field name.
var descriptorSetters = map[string]func(d *pb.Descriptors, v string) error{
	"tenant_id":       func(d *pb.Descriptors, v string) error { d.TenantId = v; return nil },
	"api_key_id":      func(d *pb.Descriptors, v string) error { d.ApiKeyId = v; return nil },
	"user_id":         func(d *pb.Descriptors, v string) error { d.UserId = v; return nil },
	"ip":              func(d *pb.Descriptors, v string) error { d.Ip = v; return nil },
	"route":           func(d *pb.Descriptors, v string) error { d.Route = v; return nil },
	"method":          func(d *pb.Descriptors, v string) error { d.Method = v; return nil },
	"service":         func(d *pb.Descriptors, v string) error { d.Service = v; return nil },
	"region":          func(d *pb.Descriptors, v string) error { d.Region = v; return nil },
	"tenant_tier":     func(d *pb.Descriptors, v string) error { d.TenantTier = v; return nil },
	"idempotency_key": func(d *pb.Descriptors, v string) error { d.IdempotencyKey = v; return nil },
	"risk_score": func(d *pb.Descriptors, v string) error {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return fmt.Errorf("%q: want a number from 0 to 1", v)
		}
		d.RiskScore = &r
		return nil
	},
	"cost": func(d *pb.Descriptors, v string) error {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil || c < 0 {
			return fmt.Errorf("%q: want a whole number, 0 or more", v)
		}
		d.Cost = c
		return nil
	},
}

// descriptorNames are the names --descriptor takes besides custom.<name>,
// in the proto's order.
func descriptorNames() []string {
	return []string{"tenant_id", "api_key_id", "user_id", "ip", "route", "method", "service", "region",
		"tenant_tier", "risk_score", "idempotency_key", "cost"}
}

// matchNames are the descriptors a block (like a policy scope) can match.
func matchNames() []string { return descriptorNames()[:9] }

// splitDescriptor splits NAME=VALUE.
func splitDescriptor(kv string) (name, value string, err error) {
	name, value, ok := strings.Cut(kv, "=")
	if !ok || name == "" {
		return "", "", fmt.Errorf("--descriptor %q: want NAME=VALUE", kv)
	}
	return name, value, nil
}

// parseDescriptors reads --descriptor NAME=VALUE flags into a check's
// descriptors.
func parseDescriptors(kvs []string) (*pb.Descriptors, error) {
	if len(kvs) == 0 {
		return nil, errors.New("--descriptor: at least one NAME=VALUE (names: " + strings.Join(descriptorNames(), ", ") + ", custom.<name>)")
	}
	d := &pb.Descriptors{}
	seen := map[string]bool{}
	for _, kv := range kvs {
		name, value, err := splitDescriptor(kv)
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("--descriptor %s: given twice", name)
		}
		seen[name] = true
		if err := setDescriptor(d, name, value); err != nil {
			return nil, fmt.Errorf("--descriptor %s: %w", name, err)
		}
	}
	return d, nil
}

func setDescriptor(d *pb.Descriptors, name, value string) error {
	if custom, ok := strings.CutPrefix(name, "custom."); ok && custom != "" {
		if d.Custom == nil {
			d.Custom = map[string]string{}
		}
		d.Custom[custom] = value
		return nil
	}
	set, ok := descriptorSetters[name]
	if !ok {
		return fmt.Errorf("unknown descriptor (known: %s, and custom.<name>)", strings.Join(descriptorNames(), ", "))
	}
	return set(d, value)
}
