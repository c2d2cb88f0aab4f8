package devmapper

// CryptCipher is the cipher of every crypt table this package makes:
// AES in XTS mode with the sector number as IV, the usual choice for
// disk encryption (its 512-bit key is two AES-256 keys).
const CryptCipher = "aes-xts-plain64"

// CryptKeySize is the size of CryptCipher's key in bytes.
const CryptKeySize = 64
