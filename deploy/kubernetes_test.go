package deploy

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/syncer-dev/syncer/internal/config"
)

// shutdownTail is what the daemon may take after SYNCER_SHUTDOWN_TIMEOUT:
// up to 5 s to cancel the batch in flight and 2 s to close its HTTP server
// (internal/daemon's Run). An orchestrator's grace period must cover the
// timeout, this tail, and a margin before it sends SIGKILL.
const (
	shutdownTail   = 7 * time.Second
	shutdownMargin = 3 * time.Second
	// shutdownTimeoutDefault is SYNCER_SHUTDOWN_TIMEOUT's default.
	shutdownTimeoutDefault = 30 * time.Second
)

// The parts of Kubernetes objects the tests read. Field names follow the
// API's JSON names.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		// Deployment and Job.
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
		// Service.
		Selector map[string]any `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
	StringData map[string]string `yaml:"stringData"`
	Data       map[string]string `yaml:"data"`
}

type k8sPodSpec struct {
	TerminationGracePeriodSeconds *int64 `yaml:"terminationGracePeriodSeconds"`
	RestartPolicy                 string `yaml:"restartPolicy"`
	SecurityContext               struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []k8sContainer `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
			Items      []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type k8sContainer struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env          []k8sEnv `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type k8sEnv struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"` // a number or a port's name
	} `yaml:"httpGet"`
}

func (c *k8sContainer) env(name string) (k8sEnv, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return k8sEnv{}, false
}

// port resolves a probe's or a Service's port (a number or the name of one
// of the container's ports) to a number.
func (c *k8sContainer) port(t *testing.T, p any) int {
	t.Helper()
	switch v := p.(type) {
	case int:
		return v
	case string:
		for _, cp := range c.Ports {
			if cp.Name == v {
				return cp.ContainerPort
			}
		}
		require.Failf(t, "unknown port", "container %s has no port named %q", c.Name, v)
	}
	require.Failf(t, "bad port", "port %v (%T)", p, p)
	return 0
}

// readManifests decodes every document of every YAML file in kubernetes/,
// by file name.
func readManifests(t *testing.T) map[string][]k8sObject {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	all := map[string][]k8sObject{}
	for _, f := range files {
		r, err := os.Open(f)
		require.NoError(t, err)
		dec := yaml.NewDecoder(r)
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			all[path.Base(f)] = append(all[path.Base(f)], o)
		}
		require.NoError(t, r.Close())
	}
	return all
}

func findObject(t *testing.T, all map[string][]k8sObject, kind string) k8sObject {
	t.Helper()
	var found []k8sObject
	for _, objs := range all {
		for _, o := range objs {
			if o.Kind == kind {
				found = append(found, o)
			}
		}
	}
	require.Len(t, found, 1, "one %s", kind)
	return found[0]
}

func onlyContainer(t *testing.T, o k8sObject) *k8sContainer {
	t.Helper()
	cs := o.Spec.Template.Spec.Containers
	require.Len(t, cs, 1, "%s %s: one container", o.Kind, o.Metadata.Name)
	return &cs[0]
}

// secretishRe names settings whose value must never be a literal.
var secretishRe = regexp.MustCompile(`(?i)token|password|secret|database_url|dsn|api_?key`)

// requireNoLiteralSecrets checks that every secret-looking variable comes
// from a Secret (or, for a *_FILE variable, names a file), and that no value
// carries a URL's password.
func requireNoLiteralSecrets(t *testing.T, c *k8sContainer) {
	t.Helper()
	for _, e := range c.Env {
		require.NotRegexp(t, `://[^/@\s]+:[^/@\s]+@`, e.Value, "%s: a URL with a password", e.Name)
		if !secretishRe.MatchString(e.Name) {
			continue
		}
		if strings.HasSuffix(e.Name, "_FILE") {
			require.True(t, filepath.IsAbs(e.Value), "%s must name a mounted file, got %q", e.Name, e.Value)
			continue
		}
		require.Empty(t, e.Value, "%s is a literal", e.Name)
		require.NotNil(t, e.ValueFrom, "%s must come from a Secret", e.Name)
		require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s must come from a Secret", e.Name)
	}
}

func requireLockedDown(t *testing.T, o k8sObject, img image) {
	t.Helper()
	ps := o.Spec.Template.Spec
	require.NotNil(t, ps.SecurityContext.RunAsNonRoot)
	require.True(t, *ps.SecurityContext.RunAsNonRoot, "%s: runAsNonRoot", o.Kind)
	if u := ps.SecurityContext.RunAsUser; u != nil {
		require.Equal(t, img.User, *u, "%s: the image's user", o.Kind)
	}
	c := onlyContainer(t, o)
	sc := c.SecurityContext
	require.NotNil(t, sc.ReadOnlyRootFilesystem)
	require.True(t, *sc.ReadOnlyRootFilesystem, "%s: read-only root file system", o.Kind)
	require.NotNil(t, sc.AllowPrivilegeEscalation)
	require.False(t, *sc.AllowPrivilegeEscalation, "%s: no privilege escalation", o.Kind)
	require.Contains(t, sc.Capabilities.Drop, "ALL", "%s: capabilities dropped", o.Kind)
	require.NotEmpty(t, c.Resources.Limits["memory"], "%s: a memory limit (the daemon sizes Go's soft limit from it)", o.Kind)
	require.NotEmpty(t, c.Resources.Requests["memory"], "%s: a memory request", o.Kind)
	require.NotEmpty(t, c.Resources.Requests["cpu"], "%s: a CPU request", o.Kind)
	requireNoLiteralSecrets(t, c)
	db, ok := c.env("DATABASE_URL")
	require.True(t, ok, "%s: DATABASE_URL", o.Kind)
	require.NotNil(t, db.ValueFrom, "%s: DATABASE_URL from a Secret", o.Kind)
}

func TestKubernetesDeployment(t *testing.T) {
	t.Parallel()
	img := readDockerfile(t)
	d := findObject(t, readManifests(t), "Deployment")
	c := onlyContainer(t, d)
	require.Equal(t, []string{"run"}, c.Args)
	requireLockedDown(t, d, img)

	// The probes hit the port the daemon listens on, which is the image's.
	port := img.Port
	if e, ok := c.env("SYNCER_HTTP_ADDR"); ok {
		port = addrPort(t, e.Value)
	}
	require.Equal(t, img.Port, port)
	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.ReadinessProbe.HTTPGet, "readiness over HTTP")
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, port, c.port(t, c.ReadinessProbe.HTTPGet.Port))
	require.NotNil(t, c.LivenessProbe)
	require.NotNil(t, c.LivenessProbe.HTTPGet, "liveness over HTTP")
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, "liveness must not depend on the database")
	require.Equal(t, port, c.port(t, c.LivenessProbe.HTTPGet.Port))

	// Long enough a grace period for a clean stop.
	timeout := shutdownTimeoutDefault
	if e, ok := c.env("SYNCER_SHUTDOWN_TIMEOUT"); ok {
		var err error
		timeout, err = time.ParseDuration(e.Value)
		require.NoError(t, err)
	}
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	require.NotNil(t, grace, "terminationGracePeriodSeconds (Kubernetes' default, 30 s, is the shutdown timeout's default)")
	require.GreaterOrEqual(t, time.Duration(*grace)*time.Second, timeout+shutdownTail+shutdownMargin,
		"terminationGracePeriodSeconds against SYNCER_SHUTDOWN_TIMEOUT %s", timeout)

	// The configured mode: the config from the ConfigMap, syncer's tables
	// in a schema of their own, every token a file of the mounted Secret.
	for _, v := range []string{"SYNCER_THIRDPARTY_TOKEN"} {
		_, ok := c.env(v)
		require.False(t, ok, "%s: a token as a variable", v)
	}
	cfg := requireConfigMounted(t, d)
	require.NotEmpty(t, cfg.Secrets, "the example config names a token")
	for _, sec := range cfg.Secrets {
		require.NotEmpty(t, sec.Ref.File, "%s: a token from a file (%s_file), not a variable", sec.Path, sec.Field)
		requireSecretFile(t, d, sec.Ref.File)
	}
}

// requireConfigMounted checks that SYNCER_CONFIG names the file of the
// kustomization's ConfigMap, mounted read-only, and that SYNCER_SCHEMA
// puts syncer's tables in a schema of their own; it returns the config,
// parsed by syncer's own parser.
func requireConfigMounted(t *testing.T, o k8sObject) *config.Config {
	t.Helper()
	c := onlyContainer(t, o)
	schema, ok := c.env("SYNCER_SCHEMA")
	require.True(t, ok, "%s: SYNCER_SCHEMA, syncer's tables out of the application's schema", o.Kind)
	require.NotEmpty(t, schema.Value)
	e, ok := c.env("SYNCER_CONFIG")
	require.True(t, ok, "%s: SYNCER_CONFIG", o.Kind)
	dir, file := filepath.Split(e.Value)
	gen := readKustomization(t).ConfigMapGenerator
	require.Len(t, gen, 1, "one ConfigMap, generated from the config")
	var local string
	for _, f := range gen[0].Files {
		key, path, found := strings.Cut(f, "=")
		if !found {
			key, path = filepath.Base(f), f
		}
		if key == file {
			local = filepath.Join("kubernetes", path)
		}
	}
	require.NotEmpty(t, local, "%s: the ConfigMap has no key %s", o.Kind, file)
	var mounted bool
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(dir) {
			continue
		}
		require.True(t, m.ReadOnly, "the config's mount is read-only")
		for _, v := range o.Spec.Template.Spec.Volumes {
			if v.Name == m.Name {
				require.NotNil(t, v.ConfigMap, "the config's volume is a ConfigMap")
				require.Equal(t, gen[0].Name, v.ConfigMap.Name)
				mounted = true
			}
		}
	}
	require.True(t, mounted, "%s: %s is not a file of the mounted ConfigMap", o.Kind, e.Value)
	cfg, err := config.Load(local, nil)
	require.NoError(t, err, "the example config is valid")
	return cfg
}

// requireSecretFile checks that path is a file of a Secret mounted
// read-only in o's pods.
func requireSecretFile(t *testing.T, o k8sObject, path string) {
	t.Helper()
	c := onlyContainer(t, o)
	dir, file := filepath.Split(path)
	var mounted bool
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(dir) {
			continue
		}
		require.True(t, m.ReadOnly, "the token's mount is read-only")
		for _, v := range o.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			require.NotNil(t, v.Secret, "the token's volume is a Secret")
			if len(v.Secret.Items) == 0 {
				mounted = true // every key of the Secret is a file
			}
			for _, it := range v.Secret.Items {
				mounted = mounted || it.Path == file
			}
		}
	}
	require.True(t, mounted, "%s is not a file of a mounted Secret", path)
}

func TestKubernetesMigrateJob(t *testing.T) {
	t.Parallel()
	img := readDockerfile(t)
	j := findObject(t, readManifests(t), "Job")
	require.Equal(t, []string{"migrate"}, onlyContainer(t, j).Args)
	require.Contains(t, []string{"Never", "OnFailure"}, j.Spec.Template.Spec.RestartPolicy)
	requireLockedDown(t, j, img)
	// migrate installs the sources' triggers: it reads the same config and
	// the same schema as the daemons, or a deploy never installs them.
	requireConfigMounted(t, j)
	d := findObject(t, readManifests(t), "Deployment")
	for _, v := range []string{"SYNCER_CONFIG", "SYNCER_SCHEMA"} {
		je, _ := onlyContainer(t, j).env(v)
		de, _ := onlyContainer(t, d).env(v)
		require.Equal(t, de.Value, je.Value, "%s: the Job's and the Deployment's", v)
	}
}

func TestKubernetesServiceReachesMetrics(t *testing.T) {
	t.Parallel()
	img := readDockerfile(t)
	all := readManifests(t)
	d := findObject(t, all, "Deployment")
	s := findObject(t, all, "Service")
	for k, v := range s.Spec.Selector {
		require.Equal(t, v, d.Spec.Template.Metadata.Labels[k], "the Service's selector %s", k)
	}
	require.Len(t, s.Spec.Ports, 1)
	require.Equal(t, img.Port, onlyContainer(t, d).port(t, s.Spec.Ports[0].TargetPort))
}

func TestKubernetesSecretIsAnExample(t *testing.T) {
	t.Parallel()
	all := readManifests(t)
	s := findObject(t, all, "Secret")
	require.Len(t, all["secret.example.yaml"], 1, "the Secret lives in secret.example.yaml only")
	require.Empty(t, s.Data, "no encoded values")
	require.Contains(t, s.StringData, "database-url")
	require.Contains(t, s.StringData, "crm-token")
	for k, v := range s.StringData {
		require.Contains(t, v, "CHANGE-ME", "%s must be a placeholder", k)
	}
	// Every key the workloads read exists in the example.
	for _, kind := range []string{"Deployment", "Job"} {
		o := findObject(t, all, kind)
		for _, e := range onlyContainer(t, o).Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				require.Equal(t, s.Metadata.Name, e.ValueFrom.SecretKeyRef.Name)
				require.Contains(t, s.StringData, e.ValueFrom.SecretKeyRef.Key)
			}
		}
		for _, v := range o.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				require.Equal(t, s.Metadata.Name, v.Secret.SecretName)
				for _, it := range v.Secret.Items {
					require.Contains(t, s.StringData, it.Key)
				}
			}
		}
	}
}

// kustomization is the part of kustomization.yaml the tests read.
type kustomization struct {
	Resources          []string `yaml:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `yaml:"name"`
		Files []string `yaml:"files"`
	} `yaml:"configMapGenerator"`
	Images []struct {
		Name string `yaml:"name"`
	} `yaml:"images"`
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	raw, err := os.ReadFile("kubernetes/kustomization.yaml")
	require.NoError(t, err)
	var k kustomization
	require.NoError(t, yaml.Unmarshal(raw, &k))
	return k
}

func TestKustomization(t *testing.T) {
	t.Parallel()
	k := readKustomization(t)
	require.NotContains(t, k.Resources, "secret.example.yaml", "the example Secret must not be applied")
	for _, r := range k.Resources {
		require.FileExists(t, filepath.Join("kubernetes", r))
	}
	all := readManifests(t)
	for _, kind := range []string{"Deployment", "Job", "Service"} {
		var in bool
		for _, r := range k.Resources {
			for _, o := range all[r] {
				in = in || o.Kind == kind
			}
		}
		require.True(t, in, "the kustomization applies the %s", kind)
	}
	require.Len(t, k.Images, 1)
	for _, kind := range []string{"Deployment", "Job"} {
		image, _, _ := strings.Cut(onlyContainer(t, findObject(t, all, kind)).Image, ":")
		require.Equal(t, k.Images[0].Name, image, "%s's image is the one the kustomization sets", kind)
	}
}
