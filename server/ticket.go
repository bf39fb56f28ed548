package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"github.com/floodgate-go/floodgate"
)

// ticketMACSize is the length of a sealed ticket's HMAC-SHA256 tag, in
// bytes (truncated to 128 bits).
const ticketMACSize = 16

// ticketContext separates ticket tags from any other use of the secret.
const ticketContext = "floodgate ticket v1\x00"

var errBadTicket = errors.New("the ticket is malformed, was not issued by this service, or was altered")

// sealTicket encodes t for a client: base64url (unpadded) of the ticket's
// binary form followed by its HMAC-SHA256 tag under secret.
func sealTicket(secret []byte, t floodgate.Ticket) (string, error) {
	b, err := t.MarshalBinary()
	if err != nil {
		return "", err
	}
	b = append(b, ticketTag(secret, b)...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// openTicket checks a sealed ticket's tag and decodes it.
func openTicket(secret []byte, s string) (floodgate.Ticket, error) {
	var t floodgate.Ticket
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) <= ticketMACSize {
		return t, errBadTicket
	}
	body, tag := b[:len(b)-ticketMACSize], b[len(b)-ticketMACSize:]
	if !hmac.Equal(tag, ticketTag(secret, body)) {
		return t, errBadTicket
	}
	if err := t.UnmarshalBinary(body); err != nil || !t.Valid() {
		return floodgate.Ticket{}, errBadTicket
	}
	return t, nil
}

func ticketTag(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ticketContext))
	m.Write(body)
	return m.Sum(nil)[:ticketMACSize]
}
