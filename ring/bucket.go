package ring

// BucketKey is the key of the bucket a check item counts against: its
// limit's name, a NUL byte, and its key. Names cannot contain NUL, so no two
// (name, key) pairs share a bucket. The cluster shards buckets by this key
// (ShardFor(BucketKey(name, key))), and so does a client that routes a check
// to its shard's leader: both must spell it the same way, here.
func BucketKey(name, key string) string {
	return name + "\x00" + key
}
