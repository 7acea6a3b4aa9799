package cli

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// envPrefix prefixes the environment variable of every setting:
// --dev-url is PTAH_DEV_URL.
const envPrefix = "PTAH"

// settings resolves each option from, in order of precedence: the flag, the
// PTAH_* environment variable, the --config file, the flag's default.
type settings struct {
	v          *viper.Viper
	cmd        *cobra.Command
	configFile string
	configKeys map[string]bool
}

func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// loadSettings binds cmd's flags, the environment and the config file.
func loadSettings(cmd *cobra.Command) (*settings, error) {
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, fmt.Errorf("binding flags: %w", err)
	}
	s := &settings{v: v, cmd: cmd, configKeys: map[string]bool{}}
	s.configFile = v.GetString("config")
	if s.configFile == "" {
		return s, nil
	}
	// The file is read on its own first so its keys can be checked: a
	// misspelt key would otherwise be ignored without a word.
	fv := viper.New()
	fv.SetConfigFile(s.configFile)
	if err := fv.ReadInConfig(); err != nil {
		return nil, usageErrorf("reading the --config file %s: %v", s.configFile, err)
	}
	known := configurableKeys(cmd.Root())
	var unknown []string
	for _, k := range fv.AllKeys() {
		if !known[k] {
			unknown = append(unknown, k)
		}
		s.configKeys[k] = true
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, usageErrorf("the --config file %s has unknown keys: %s (keys are flag names: %s)",
			s.configFile, strings.Join(unknown, ", "), strings.Join(sortedKeys(known), ", "))
	}
	if err := v.MergeConfigMap(fv.AllSettings()); err != nil {
		return nil, usageErrorf("reading the --config file %s: %v", s.configFile, err)
	}
	return s, nil
}

// configurableKeys are the flags of every command that a config file may
// set; a key applies to whichever commands have that flag.
func configurableKeys(root *cobra.Command) map[string]bool {
	keys := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			switch f.Name {
			case "help", "version", "config":
			default:
				keys[f.Name] = true
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return keys
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (s *settings) String(key string) string { return s.v.GetString(key) }

// StringSlice is a repeatable flag's values (also comma-separated, or
// space-separated in its PTAH_* variable).
func (s *settings) StringSlice(key string) []string {
	var out []string
	for _, v := range s.v.GetStringSlice(key) {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Bool parses strictly: viper turns anything unparsable into false, and a
// typo in PTAH_DETAILED_EXITCODE must not silently change a CI job's result.
func (s *settings) Bool(key string) (bool, error) {
	raw := s.v.GetString(key)
	b, err := strconv.ParseBool(raw)
	if err != nil {
		return false, usageErrorf("%s: %q is not true or false", s.origin(key), raw)
	}
	return b, nil
}

// Duration parses a Go duration ("90s", "30m") strictly.
func (s *settings) Duration(key string) (time.Duration, error) {
	raw := s.v.GetString(key)
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, usageErrorf("%s: %q is not a duration such as 90s or 30m", s.origin(key), raw)
	}
	return d, nil
}

// origin names where the value of key came from, for error messages.
func (s *settings) origin(key string) string {
	if f := s.cmd.Flags().Lookup(key); f != nil && f.Changed {
		return "--" + key
	}
	if os.Getenv(envName(key)) != "" { // viper ignores empty variables too
		return envName(key)
	}
	if s.configKeys[key] {
		return fmt.Sprintf("%s in %s", key, s.configFile)
	}
	return "--" + key
}
