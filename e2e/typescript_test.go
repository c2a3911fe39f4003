//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"warren/api"
)

// TestTypeScriptSDK runs the TypeScript SDK's live tests
// (sdk/typescript/test/live.test.mjs) under node's test runner against the
// shared daemon, with a tenant key of their own. The SDK must be built
// first (scripts/test.sh runs npm ci and npm run build in sdk/typescript).
func TestTypeScriptSDK(t *testing.T) {
	need(t)
	node := nodeJS(t, "the TypeScript SDK", 18, 0, 0)
	dir, err := filepath.Abs(filepath.Join("..", "sdk", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dist", "index.js")); err != nil {
		t.Fatalf("the TypeScript SDK is not built in %s: run `npm ci --prefix sdk/typescript && npm run build --prefix sdk/typescript` (scripts/test.sh does): %v", dir, err)
	}
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "typescript-sdk"})
	if err != nil {
		t.Fatal(err)
	}
	nodeTests(t, node, dir, "test/live.test.mjs", nil, []string{"WARREN_URL=" + shared.url, "WARREN_API_KEY=" + k.Key})
}
