package curatorv1

import "crypto/ed25519"

// ownerKeyRotationContext starts every message a new owner key signs to
// consent to an owner key rotation, so that the signature can never be
// taken for one made for any other purpose.
const ownerKeyRotationContext = "polis owner key rotation"

// OwnerKeyRotationMessage is the message the new owner key signs in
// RotateOwnerKeyRequest.new_owner_key_signature: the text "polis owner key
// rotation", a zero byte, the DER of the cluster CA certificate, and the
// current owner key. The CA certificate binds the signature to one
// cluster, the current key to one rotation.
func OwnerKeyRotationMessage(caCertificate []byte, currentOwnerKey ed25519.PublicKey) []byte {
	msg := make([]byte, 0, len(ownerKeyRotationContext)+1+len(caCertificate)+len(currentOwnerKey))
	msg = append(msg, ownerKeyRotationContext...)
	msg = append(msg, 0)
	msg = append(msg, caCertificate...)
	return append(msg, currentOwnerKey...)
}
