// Package s3test starts a real S3-compatible server for tests: the
// versitygw gateway with its posix backend on a temporary directory, one
// fresh bucket in it. The blob/s3 tests and the end-to-end suite use it so
// that the S3 backend is tested against S3, not against a fake. It is test
// support only, and not a way to run S3 in production.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const (
	region = "us-east-1"
	bucket = "warren-test"
	// startTimeout bounds the wait for the server to answer; it starts in
	// well under a second, but a loaded CI machine is slow.
	startTimeout = 30 * time.Second
)

// Server is a running versitygw with one empty bucket.
type Server struct {
	// URL opens the bucket with blob/s3.Open, for example
	// s3://warren-test?endpoint=http://127.0.0.1:PORT&region=us-east-1&use_path_style=true.
	// Append "&prefix=DIR/" to use part of it.
	URL string
	// Env holds AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION
	// as NAME=value, for the environment of a child process (such as a
	// warren daemon) that should reach the server.
	Env []string
}

// Start starts versitygw on a free 127.0.0.1 port and a new temporary
// directory, waits until it answers, creates a bucket, and stops the
// server when the test ends. It skips the test when the binary is
// missing: it runs $WARREN_VERSITYGW (failing the test if that names no
// file).
//
// When t can set environment variables for the test (a *testing.T, B or
// F), Start also sets the AWS_* variables of Server.Env in this process
// with t.Setenv, so that blob/s3.Open finds the credentials; as with
// t.Setenv, the test and its parents must then not call t.Parallel. With
// any other testing.TB, the caller sets them from Env.
func Start(t testing.TB) Server {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	access, secret := "warren-"+randomHex(4), randomHex(20)
	logPath := filepath.Join(dir, "versitygw.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child holds its own copy

	// Root credentials go in the environment, not the command line that
	// ps shows. --quiet drops the per-request log lines.
	cmd := exec.Command(bin, "--port", addr, "--region", region, "--quiet", "posix", root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+access, "ROOT_SECRET_ACCESS_KEY="+secret)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test binary killed by its timeout runs no cleanup: the server
	// goes with it, not on (holding whatever descriptors it inherited,
	// such as a lock the test run held).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	serverLog := func() string {
		b, _ := os.ReadFile(logPath)
		return string(bytes.TrimSpace(b))
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})

	endpoint := "http://" + addr
	client := s3.New(s3.Options{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := waitListening(ctx, addr, exited); err != nil {
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w: %v", err, waitErr)
		}
		t.Fatalf("versitygw on %s: %v\nlog:\n%s", addr, err, serverLog())
	}
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("versitygw: create bucket %s: %v\nlog:\n%s", bucket, err, serverLog())
	}

	q := url.Values{}
	q.Set("endpoint", endpoint)
	q.Set("region", region)
	q.Set("use_path_style", "true")
	srv := Server{
		URL: "s3://" + bucket + "?" + q.Encode(),
		Env: []string{
			"AWS_ACCESS_KEY_ID=" + access,
			"AWS_SECRET_ACCESS_KEY=" + secret,
			"AWS_REGION=" + region,
		},
	}
	if st, ok := t.(interface{ Setenv(key, value string) }); ok {
		for _, kv := range srv.Env {
			k, v, _ := strings.Cut(kv, "=")
			st.Setenv(k, v)
		}
		// A session token or profile from the developer's own AWS setup
		// would spoil the static keys.
		st.Setenv("AWS_SESSION_TOKEN", "")
		st.Setenv("AWS_PROFILE", "")
	}
	return srv
}

// binary finds the versitygw binary, $WARREN_VERSITYGW (scripts/deps.sh
// builds it and sets it), or skips the test.
func binary(t testing.TB) string {
	t.Helper()
	p := os.Getenv("WARREN_VERSITYGW")
	if p == "" {
		t.Skip("versitygw not built: $WARREN_VERSITYGW is not set (scripts/test.sh builds it and sets it)")
	}
	if _, err := os.Stat(p); err != nil {
		// Set on purpose, so a typo must not pass as a skip.
		t.Fatalf("versitygw not usable at $WARREN_VERSITYGW: %v", err)
	}
	return p
}

// freeAddr returns a 127.0.0.1 address with a port no one listened on a
// moment ago. Another process could take it before versitygw does; then
// versitygw exits and Start fails with its log, which says so.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

var errExited = errors.New("exited before answering")

// waitListening polls until addr accepts a connection, the process exits
// or ctx ends.
func waitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("not answering after %v: %w", startTimeout, err)
		case <-tick.C:
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
