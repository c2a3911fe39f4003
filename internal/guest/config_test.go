package guest

import "testing"

func TestParseTemplateConfig(t *testing.T) {
	good := `{"env":{"A":"1"},"workdir":"/opt/app","user":"user","start":"python3 -m http.server"}`
	c, err := ParseTemplateConfig([]byte(good))
	if err != nil || c.Env["A"] != "1" || c.Workdir != "/opt/app" || c.User != "user" || c.Start == "" {
		t.Fatalf("ParseTemplateConfig(%s) = %+v, %v", good, c, err)
	}
	for _, bad := range []string{
		`{"env":{"A=B":"1"}}`, `{"env":{"":"1"}}`, `{"env":{"A":"x\u0000"}}`,
		`{"workdir":"relative"}`, `{"user":"a\u0000"}`, `{"start":"x\u0000"}`, `[1]`, `{`,
	} {
		if _, err := ParseTemplateConfig([]byte(bad)); err == nil {
			t.Errorf("ParseTemplateConfig(%s): no error", bad)
		}
	}
}
