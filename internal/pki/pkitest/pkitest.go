// Package pkitest gives tests members of a fleet's PKI (package pki): a CA
// of their own and members it issued, valid for an hour.
package pkitest

import (
	"testing"
	"time"

	"warren/internal/pki"
)

// CA returns a new CA of a fleet named fleet.
func CA(t testing.TB, fleet string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(fleet, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Member returns the member id of ca's fleet.
func Member(t testing.TB, ca *pki.CA, id pki.Identity) *pki.Member {
	t.Helper()
	cert, key, err := ca.Issue(id, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pki.LoadMember(cert, key, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
