package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"warren/internal/atomicfile"
	"warren/internal/pki"
)

// fleetCommands are the subcommands of `warren fleet`.
var fleetCommands = []command{
	{"ca", "make the fleet's certificate authority", runFleetCA},
	{"cert", "make a control replica's or a node's certificate", runFleetCert},
}

func runFleet(ctx context.Context, c *cli, args []string) error {
	return runGroup(ctx, c, "fleet", fleetCommands, args)
}

// The files of a CA directory, and of a member's.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca.key"
)

func runFleetCA(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("fleet ca", "[flags] DIR",
		"Make the fleet's certificate authority in DIR: ca.pem, which every member\ntrusts, and ca.key, which makes members (keep it with the operator, not on\nthe nodes). Control replicas and nodes take only each other's certificates\nfrom it.")
	name := fs.String("name", "warren", "the fleet's name, in the CA's certificate")
	rest, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	dir := rest[0]
	for _, f := range []string{caCertFile, caKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("%s already exists: a fleet has one CA (remove it to start a new fleet)", filepath.Join(dir, f))
		}
	}
	ca, err := pki.NewCA(*name, time.Now())
	if err != nil {
		return err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, caKeyFile), key, 0o600); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, caCertFile), ca.CertPEM, 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n%s\n", filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile))
	return err
}

func runFleetCert(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("fleet cert", "--ca DIR --role ROLE --name NAME [flags] OUT",
		"Make the certificate of a fleet member from the CA in DIR: NAME.pem and\nNAME.key in OUT, with the CA's ca.pem beside them. ROLE is control (a\ncontrol replica) or node; NAME is the member's name in the fleet (a node's\nis its node ID).")
	caDir := fs.String("ca", "", "the directory of the fleet's CA (warren fleet ca)")
	role := fs.String("role", "", "control or node")
	name := fs.String("name", "", "the member's name: 1-63 of a-z, 0-9, '.' and '-'")
	days := fs.Int("days", 365, "days the certificate is valid")
	rest, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	switch {
	case *caDir == "":
		return badUsage(fs, "--ca is required")
	case *days < 1:
		return badUsage(fs, fmt.Sprintf("--days must be at least 1, got %d", *days))
	}
	certPEM, err := os.ReadFile(filepath.Join(*caDir, caCertFile))
	if err != nil {
		return fmt.Errorf("read the CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(*caDir, caKeyFile))
	if err != nil {
		return fmt.Errorf("read the CA: %w", err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return err
	}
	cert, key, err := ca.Issue(pki.Identity{Role: pki.Role(*role), Name: *name}, time.Now(), time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	out := rest[0]
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	keyPath := filepath.Join(out, *name+".key")
	if _, err := os.Stat(keyPath); err == nil {
		return fmt.Errorf("%s already exists", keyPath)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := atomicfile.Write(keyPath, key, 0o600); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(out, *name+".pem"), cert, 0o644); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(out, caCertFile), ca.CertPEM, 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n%s\n", filepath.Join(out, *name+".pem"), keyPath)
	return err
}
