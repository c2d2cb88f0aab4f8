package etcdproxy

// prefixed moves the range [key, end) of the confined key space under
// prefix, with etcd's range conventions: an empty end names the single key,
// the end "\x00" means "every key from key on", which becomes the end of
// the prefix, and any other end is moved under the prefix like key. The
// result never leaves [prefix, end of prefix).
func prefixed(prefix string, key, end []byte) (pkey, pend []byte) {
	pkey = append([]byte(prefix), key...)
	switch {
	case len(end) == 0:
		return pkey, nil
	case len(end) == 1 && end[0] == 0:
		return pkey, prefixEnd(prefix)
	default:
		return pkey, append([]byte(prefix), end...)
	}
}

// prefixEnd is the first key after every key that starts with prefix.
// Config validation guarantees prefix ends in "/", so the last byte can be
// incremented.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	end[len(end)-1]++
	return end
}

// unprefixed strips prefix from a key read from etcd. ok is false for a key
// outside the prefix, which a confined request cannot produce; callers drop
// such a key rather than hand it out.
func unprefixed(prefix string, key []byte) (rest []byte, ok bool) {
	if len(key) < len(prefix) || string(key[:len(prefix)]) != prefix {
		return nil, false
	}
	return key[len(prefix):], true
}
