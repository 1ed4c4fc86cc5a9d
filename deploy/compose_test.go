package deploy

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/config"
)

// composeFile is the part of docker-compose.yml the tests read. The file
// uses the map form of environment and the short form of ports.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Secrets  map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       string            `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	EnvFile     []string          `yaml:"env_file"`
	Ports       []string          `yaml:"ports"`
	Secrets     []string          `yaml:"secrets"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	StopGracePeriod string `yaml:"stop_grace_period"`
}

// composeDuration parses a compose duration ("45s", "1m30s").
func composeDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		n, aerr := strconv.Atoi(s)
		require.NoError(t, aerr, "duration %q", s)
		d = time.Duration(n) * time.Second
	}
	return d
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c))
	require.NotEmpty(t, c.Services)
	return c
}

// readEnvFile reads KEY=VALUE lines, as compose does for env_file.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q", path, line)
		env[k] = v
	}
	require.NoError(t, sc.Err())
	return env
}

// commandOf is the syncer command a service built from the Dockerfile runs.
func commandOf(s composeService) string {
	if len(s.Command) == 0 {
		return "run" // the image's CMD
	}
	return s.Command[0]
}

func TestComposeLeavesTheHostsPostgreSQLAlone(t *testing.T) {
	t.Parallel()
	for name, s := range readCompose(t).Services {
		for _, p := range s.Ports {
			// [ip:]host:container[/proto]; a bare container port gets a
			// random host port and clashes with nothing.
			parts := strings.Split(strings.SplitN(p, "/", 2)[0], ":")
			if len(parts) < 2 {
				continue
			}
			host := parts[len(parts)-2]
			require.NotEqual(t, "5432", host, "service %s publishes the host's PostgreSQL port (%s)", name, p)
		}
	}
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	img := readDockerfile(t)

	pg, ok := c.Services["postgres"]
	require.True(t, ok, "a postgres service")
	require.NotNil(t, pg.Healthcheck)
	require.False(t, pg.Healthcheck.Disable)
	require.NotEmpty(t, pg.Healthcheck.Test)

	byCommand := map[string]string{}
	for name, s := range c.Services {
		if s.Build == "" {
			continue
		}
		cmd := commandOf(s)
		byCommand[cmd] = name
		// The image's HEALTHCHECK asks the daemon's /healthz: only `run`
		// answers it; every other command must turn it off.
		if cmd == "run" {
			require.NotNil(t, s.Healthcheck, "service %s: healthcheck", name)
			require.False(t, s.Healthcheck.Disable, "service %s: healthcheck", name)
			require.Equal(t, append([]string{"CMD"}, img.Healthcheck...), s.Healthcheck.Test, "service %s: healthcheck", name)
		} else {
			require.NotNil(t, s.Healthcheck, "service %s runs %s, which serves no /healthz: disable the image's check", name, cmd)
			require.True(t, s.Healthcheck.Disable, "service %s runs %s, which serves no /healthz: disable the image's check", name, cmd)
		}
	}
	for _, cmd := range []string{"migrate", "fake-thirdparty", "run"} {
		require.Contains(t, byCommand, cmd, "a service running syncer %s", cmd)
	}

	daemon := c.Services[byCommand["run"]]
	require.Equal(t, "service_completed_successfully", daemon.DependsOn[byCommand["migrate"]].Condition, "migrate before run")
	require.Contains(t, daemon.DependsOn, byCommand["fake-thirdparty"])
	require.Equal(t, "service_healthy", c.Services[byCommand["migrate"]].DependsOn["postgres"].Condition)
	if addr, ok := daemon.Environment["SYNCER_HTTP_ADDR"]; ok {
		require.Equal(t, img.Port, addrPort(t, addr))
	}

	timeout := shutdownTimeoutDefault
	if v, ok := daemon.Environment["SYNCER_SHUTDOWN_TIMEOUT"]; ok {
		timeout = composeDuration(t, v)
	}
	require.NotEmpty(t, daemon.StopGracePeriod, "stop_grace_period (compose's default is 10 s)")
	require.GreaterOrEqual(t, composeDuration(t, daemon.StopGracePeriod), timeout+shutdownTail+shutdownMargin)
}

func TestComposeTokenIsNotInline(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	for name, s := range c.Services {
		for k, v := range s.Environment {
			if strings.Contains(k, "TOKEN") && !strings.HasSuffix(k, "_FILE") {
				require.Failf(t, "inline token", "service %s: %s=%q in docker-compose.yml; use a secret or an env file", name, k, v)
			}
		}
	}

	var daemon, fake composeService
	for _, s := range c.Services {
		if s.Build == "" {
			continue
		}
		switch commandOf(s) {
		case "run":
			daemon = s
		case "fake-thirdparty":
			fake = s
		}
	}
	// The daemon reads the token from a compose secret.
	tf := daemon.Environment["SYNCER_THIRDPARTY_TOKEN_FILE"]
	require.NotEmpty(t, tf, "SYNCER_THIRDPARTY_TOKEN_FILE")
	secret, ok := strings.CutPrefix(tf, "/run/secrets/")
	require.True(t, ok, "the token file is a compose secret, got %s", tf)
	require.Contains(t, daemon.Secrets, secret)
	require.Contains(t, c.Secrets, secret)
	tokenFile := filepath.Join("..", c.Secrets[secret].File)
	token, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	require.NotEmpty(t, strings.TrimSpace(string(token)))

	// The fake expects the same token, from its env file.
	env := map[string]string{}
	for _, f := range fake.EnvFile {
		for k, v := range readEnvFile(t, filepath.Join("..", f)) {
			env[k] = v
		}
	}
	require.Equal(t, strings.TrimSpace(string(token)), env["FAKE_TOKEN"], "%s and the fake's FAKE_TOKEN differ", tokenFile)
}

// TestComposeConfiguredMode: migrate and the daemon read the same config
// and schema, the config is a file of the repository mounted into both,
// valid, its tokens are compose secrets of the daemon, and the
// application's table it exports is created with the database.
func TestComposeConfiguredMode(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	byCommand := map[string]composeService{}
	for _, s := range c.Services {
		if s.Build != "" {
			byCommand[commandOf(s)] = s
		}
	}
	daemon, migrate := byCommand["run"], byCommand["migrate"]
	for _, v := range []string{"SYNCER_CONFIG", "SYNCER_SCHEMA"} {
		require.NotEmpty(t, daemon.Environment[v], "the daemon's %s", v)
		require.Equal(t, daemon.Environment[v], migrate.Environment[v], "%s: migrate installs what the daemon exports", v)
	}
	mounted := func(s composeService, target string) string {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == target {
				return filepath.Join("..", parts[0])
			}
		}
		return ""
	}
	local := mounted(daemon, daemon.Environment["SYNCER_CONFIG"])
	require.NotEmpty(t, local, "the daemon's config is not mounted")
	require.Equal(t, local, mounted(migrate, migrate.Environment["SYNCER_CONFIG"]), "migrate mounts the same config")
	cfg, err := config.Load(local, nil)
	require.NoError(t, err)
	for _, sec := range cfg.Secrets {
		secret, ok := strings.CutPrefix(sec.Ref.File, "/run/secrets/")
		require.True(t, ok, "%s: a token from a compose secret's file, got %+v", sec.Path, sec.Ref)
		require.Contains(t, daemon.Secrets, secret)
		require.Contains(t, c.Secrets, secret)
	}
	var initSQL []byte
	for _, v := range c.Services["postgres"].Volumes {
		if src, target, _ := strings.Cut(v, ":"); strings.HasPrefix(target, "/docker-entrypoint-initdb.d/") {
			b, err := os.ReadFile(filepath.Join("..", src))
			require.NoError(t, err)
			initSQL = append(initSQL, b...)
		}
	}
	for _, s := range cfg.Sources {
		require.Contains(t, string(initSQL), "CREATE TABLE "+s.Table+" ", "the database is created with the table of source %s", s.Name)
	}
}

func TestComposeDuration(t *testing.T) {
	t.Parallel()
	require.Equal(t, 45*time.Second, composeDuration(t, "45s"))
	require.Equal(t, 90*time.Second, composeDuration(t, "1m30s"))
	require.Equal(t, 30*time.Second, composeDuration(t, strconv.Itoa(30)))
}
