package pgfence

import (
	"embed"
	"regexp"
)

// SchemaVersion is the version of the fencegate schema this package
// installs. Version 1 is the schema the proxy used to install by itself
// (marks owned by the application role, no protected tables); version 3
// added signed tokens (fencegate.signing_keys and the fence with a proof);
// version 4 checks UPDATEs of tables that hold rows row by row; version 5
// added the floor (fencegate.floor) and the prune of marks below it;
// version 6 added the effects (fencegate.effects, fencegate.effect and the
// relay's functions); version 7 checks UPDATEs of tables that hold rows per
// statement again, the new rows' resources (fencegate.check_update_new),
// and row by row only where a row's resource changes (fencegate_move);
// version 8's statement checks compare every row's resource with the first
// row's before they group any, so a write of one resource hashes nothing;
// version 9's grouped checks take one offending resource (LIMIT 1), so a
// statement that writes several unfenced resources is refused with FG002
// under plpgsql.extra_errors = 'too_many_rows' too, not P0003.
const SchemaVersion = 9

// DefaultOwnerRole is the role that owns schema fencegate when
// InstallOptions.OwnerRole is empty.
const DefaultOwnerRole = "fencegate_owner"

//go:embed sql/schema.sql sql/guard.sql
var sqlFiles embed.FS

func mustRead(name string) string {
	b, err := sqlFiles.ReadFile(name)
	if err != nil {
		panic("pgfence: missing embedded " + name)
	}
	return string(b)
}

var (
	schemaSQL = mustRead("sql/schema.sql")
	guardSQL  = mustRead("sql/guard.sql")
)

// function describes one function of schema fencegate as this version
// installs it. HealthQuery holds the same facts, fingerprinted; a test keeps
// the two in step.
type function struct {
	name     string // fencegate.name
	args     string // pg_get_function_identity_arguments
	result   string // pg_get_function_result
	definer  bool   // SECURITY DEFINER
	app      bool   // EXECUTE granted to application roles
	relay    bool   // EXECUTE granted to relay roles
	guard    bool   // part of the DDL guard, owned by a superuser
	file     string // the embedded file that defines it
	bodyFrom string // body text, filled in by init from the file
}

var functions = []*function{
	{name: "schema_version", args: "", result: "integer", file: "schema"},
	{name: "fence", args: "resource text, token bigint", result: "bigint", definer: true, app: true, file: "schema"},
	{name: "fence", args: "resource text, token bigint, proof text", result: "bigint", definer: true, app: true, file: "schema"},
	{name: "fence_many", args: "resources text[], token bigint", result: "bigint", definer: true, app: true, file: "schema"},
	{name: "check_insert", args: "", result: "trigger", file: "schema"},
	{name: "check_update", args: "", result: "trigger", file: "schema"},
	{name: "check_update_new", args: "", result: "trigger", file: "schema"},
	{name: "check_delete", args: "", result: "trigger", file: "schema"},
	{name: "check_row", args: "", result: "trigger", file: "schema"},
	{name: "refuse_truncate", args: "", result: "trigger", file: "schema"},
	{name: "tree", args: "tbl regclass", result: "TABLE(relid regclass, depth integer)", file: "schema"},
	{name: "shape", args: "tbl regclass", result: "void", file: "schema"},
	{name: "check_expression", args: "probe regclass, tbl regclass", result: "void", file: "schema"},
	{name: "protect", args: "tbl regclass, resource text", result: "void", file: "schema"},
	{name: "unprotect", args: "tbl regclass", result: "void", file: "schema"},
	{name: "set_mark", args: "resource text, token bigint, reason text", result: "bigint", definer: true, file: "schema"},
	{name: "prune_batch", args: "floor bigint, after text, batch integer", result: "TABLE(deleted bigint, last_resource text)", file: "schema"},
	{name: "prune", args: "floor bigint", result: "bigint", file: "schema"},
	{name: "effect", args: "resource text, target text, payload jsonb", result: "bigint", definer: true, app: true, file: "schema"},
	{name: "effect_claim", args: "targets text[], batch integer", result: "TABLE(id bigint, resource text, token bigint, target text, payload jsonb, idem_key uuid, attempts integer, created_at timestamp with time zone)", definer: true, relay: true, file: "schema"},
	{name: "effect_record", args: "id bigint, outcome text, status integer, response text, error text, retry_at timestamp with time zone", result: "boolean", definer: true, relay: true, file: "schema"},
	{name: "effect_stats", args: "", result: "TABLE(pending bigint, failed bigint, oldest_pending timestamp with time zone)", definer: true, relay: true, file: "schema"},
	{name: "effect_prune", args: "retain interval, batch integer", result: "bigint", definer: true, relay: true, file: "schema"},
	{name: "guard_ddl", args: "", result: "event_trigger", guard: true, file: "guard"},
	{name: "guard_drop", args: "", result: "event_trigger", guard: true, file: "guard"},
}

// bodyRE finds each function definition of the embedded files and its body
// (PostgreSQL stores the text between the $fg$ quotes verbatim as prosrc).
var bodyRE = regexp.MustCompile(`(?s)CREATE OR REPLACE FUNCTION fencegate\.(\w+)\(([^)]*)\).*?AS \$fg\$(.*?)\$fg\$;`)

func init() {
	bodies := map[string]string{}
	for _, src := range []string{schemaSQL, guardSQL} {
		for _, m := range bodyRE.FindAllStringSubmatch(src, -1) {
			bodies[m[1]+"("+m[2]+")"] = m[3]
		}
	}
	for _, f := range functions {
		b, ok := bodies[f.name+"("+f.args+")"]
		if !ok {
			panic("pgfence: no body for fencegate." + f.name + " in the embedded SQL")
		}
		f.bodyFrom = b
	}
	if len(bodies) != len(functions) {
		panic("pgfence: the embedded SQL defines functions the package does not list")
	}
}

// relayFunctionNamesSQL lists, quoted for SQL, the functions a relay role
// may execute (InstallOptions.Relay).
const relayFunctionNamesSQL = `'effect_claim', 'effect_record', 'effect_stats', 'effect_prune'`

// relayFunctionSigs are the signatures of the relay's functions, as GRANT
// takes them.
const relayFunctionSigs = "fencegate.effect_claim(text[], integer), fencegate.effect_record(bigint, text, integer, text, text, timestamp with time zone), fencegate.effect_stats(), fencegate.effect_prune(interval, integer)"
