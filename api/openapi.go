package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the HTTP API (openapi.json beside
// this file), served at GET /openapi.json.
//
//go:embed openapi.json
var OpenAPI string
