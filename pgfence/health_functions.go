package pgfence

// healthFunctions is the VALUES list of HealthQuery's "want": every function
// of schema fencegate with its identity arguments, SECURITY DEFINER, whether
// application roles may execute it, whether it belongs to the DDL guard, its
// pinned settings and the md5 of its body. TestHealthFunctions regenerates
// it from the embedded SQL and fails when it is out of step.
const healthFunctions = `	('schema_version', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'b0c42047143799a866af538d49f18973'),
	('fence', 'resource text, token bigint', true, true, false, '{"search_path=pg_catalog, pg_temp",lock_timeout=5s}', '409136278f0fae2ad9d9b8f040dc184e'),
	('fence', 'resource text, token bigint, proof text', true, true, false, '{"search_path=pg_catalog, pg_temp",lock_timeout=5s}', '44b2bd2a4c0e37bdbc7e29eb3ccd0cd1'),
	('fence_many', 'resources text[], token bigint', true, true, false, '{"search_path=pg_catalog, pg_temp",lock_timeout=5s}', '179d5e0beafab46f559d6509b96575e7'),
	('check_insert', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'aedd51d69d6aa1b1918855994aff0c23'),
	('check_update', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '75c5a200693d1d6fba2b73b06a43e8b7'),
	('check_delete', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '950eb5c2f7cea4ac1f4ea18cc7019b9d'),
	('check_row', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '5457e35ca6c359285e2607e25ee149f4'),
	('refuse_truncate', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '1a92ad27a4a8f6654f32d9d0fb9e61c5'),
	('tree', 'tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '4101f5c86612e798aa0fc61a8a807542'),
	('shape', 'tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'a943db7088cdbff3073d9328224b58bf'),
	('check_expression', 'probe regclass, tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '052e675546b0c7ed52c3ba91132207d4'),
	('protect', 'tbl regclass, resource text', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'ee6dd4a0f000e87444b79e2ca9c53899'),
	('unprotect', 'tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'cbaf82bdef9110557e3113820cfb4fee'),
	('set_mark', 'resource text, token bigint, reason text', true, false, false, '{"search_path=pg_catalog, pg_temp"}', '6926ab9121062ec5840b934392d90da2'),
	('prune_batch', 'floor bigint, after text, batch integer', false, false, false, '{"search_path=pg_catalog, pg_temp",lock_timeout=5s}', 'a56e8f8133e34280e0ff61174db47625'),
	('prune', 'floor bigint', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '7743b9425f2c3f2b57926e23b5dead7e'),
	('guard_ddl', '', false, false, true, '{"search_path=pg_catalog, pg_temp"}', '83f4762ad7883d491dee60b448c9ec36'),
	('guard_drop', '', false, false, true, '{"search_path=pg_catalog, pg_temp"}', 'bbceeb1d3b5b2db6c6343ef90a6ea3ed')
`

// inventoryExpected is the VALUES list of what sql/schema.sql creates in
// schema fencegate and on its relations, as InventoryQuery prints it (kind,
// relation, name, definition). TestInventoryExpected regenerates it from the
// embedded SQL and fails when it is out of step.
const inventoryExpected = `	('column', 'fencegate.audit', 'at', 'timestamp with time zone NOT NULL'),
	('column', 'fencegate.audit', 'by_role', 'text NOT NULL'),
	('column', 'fencegate.audit', 'by_session', 'text NOT NULL'),
	('column', 'fencegate.audit', 'client_addr', 'inet'),
	('column', 'fencegate.audit', 'id', 'bigint NOT NULL GENERATED ALWAYS AS IDENTITY'),
	('column', 'fencegate.audit', 'new_token', 'bigint NOT NULL'),
	('column', 'fencegate.audit', 'old_token', 'bigint'),
	('column', 'fencegate.audit', 'reason', 'text'),
	('column', 'fencegate.audit', 'resource', 'text COLLATE "C" NOT NULL'),
	('column', 'fencegate.marks', 'holder_boot', 'timestamp with time zone'),
	('column', 'fencegate.marks', 'holder_xid', 'xid8'),
	('column', 'fencegate.marks', 'resource', 'text COLLATE "C" NOT NULL'),
	('column', 'fencegate.marks', 'token', 'bigint NOT NULL'),
	('column', 'fencegate.marks', 'updated_at', 'timestamp with time zone NOT NULL'),
	('column', 'fencegate.signing_keys', '"position"', 'integer NOT NULL'),
	('column', 'fencegate.signing_keys', 'added_at', 'timestamp with time zone NOT NULL'),
	('column', 'fencegate.signing_keys', 'cluster_id', 'text NOT NULL'),
	('column', 'fencegate.signing_keys', 'inner_pad', 'bytea NOT NULL'),
	('column', 'fencegate.signing_keys', 'key_id', 'text COLLATE "C" NOT NULL'),
	('column', 'fencegate.signing_keys', 'message_prefix', 'bytea NOT NULL'),
	('column', 'fencegate.signing_keys', 'outer_pad', 'bytea NOT NULL'),
	('constraint', 'fencegate.audit', 'audit_pkey', 'PRIMARY KEY (id)'),
	('constraint', 'fencegate.marks', 'marks_pkey', 'PRIMARY KEY (resource)'),
	('constraint', 'fencegate.marks', 'marks_token_check', 'CHECK ((token >= 0))'),
	('constraint', 'fencegate.signing_keys', 'signing_keys_inner_pad_check', 'CHECK ((octet_length(inner_pad) = 64))'),
	('constraint', 'fencegate.signing_keys', 'signing_keys_outer_pad_check', 'CHECK ((octet_length(outer_pad) = 64))'),
	('constraint', 'fencegate.signing_keys', 'signing_keys_pkey', 'PRIMARY KEY (key_id)'),
	('default', 'fencegate.audit', 'at', 'clock_timestamp()'),
	('default', 'fencegate.audit', 'by_role', 'CURRENT_USER'),
	('default', 'fencegate.audit', 'by_session', 'SESSION_USER'),
	('default', 'fencegate.audit', 'client_addr', 'inet_client_addr()'),
	('default', 'fencegate.marks', 'updated_at', 'now()'),
	('default', 'fencegate.signing_keys', 'added_at', 'now()'),
	('relation', '', 'audit', 'table'),
	('relation', '', 'audit_id_seq', 'sequence'),
	('relation', '', 'floor', 'sequence'),
	('relation', '', 'marks', 'table'),
	('relation', '', 'protected', 'view'),
	('relation', '', 'signing_keys', 'table')
`
