package redis

// slotOf returns the Redis Cluster slot of the keys of a rule key under tag:
// CRC16 of the hash tag (see keyOf).
func slotOf(tag HashTag, scope, key string) uint16 {
	if tag == TagLimiter {
		if lim := limiterOf(scope); lim != "" {
			// A limiter name holds no brace: the tag is the whole name.
			return crc16(0, lim) % 16384
		}
	}
	return ruleSlot(scope, key)
}

// ruleSlot is the slot of the tag {scope:key}, which ends at the key's first
// '}' if it has one.
func ruleSlot(scope, key string) uint16 {
	crc := crc16(0, scope)
	crc = crc16(crc, ":")
	for i := 0; i < len(key); i++ {
		if key[i] == '}' {
			key = key[:i]
			break
		}
	}
	return crc16(crc, key) % 16384
}

// crc16 continues a CRC-16/XMODEM (the Cluster key hash) over s.
func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
