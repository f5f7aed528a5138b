package pgfence

// healthFunctions is the VALUES list of HealthQuery's "want": every function
// of schema fencegate with its identity arguments, SECURITY DEFINER, whether
// application roles may execute it, whether it belongs to the DDL guard, its
// pinned settings and the md5 of its body. TestHealthFunctions regenerates
// it from the embedded SQL and fails when it is out of step.
const healthFunctions = `	('schema_version', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'bbc7d0855b5e80354c6cbf365d22a1b5'),
	('fence', 'resource text, token bigint', true, true, false, '{"search_path=pg_catalog, pg_temp",lock_timeout=5s}', '8b124db17c0bd9cd2b601dc3cea8cd7b'),
	('fence', 'resource text, token bigint, proof text', true, true, false, '{"search_path=pg_catalog, pg_temp",lock_timeout=5s}', '2c6f08f6df1a3bb5b474c2141fd17f9e'),
	('fence_many', 'resources text[], token bigint', true, true, false, '{"search_path=pg_catalog, pg_temp",lock_timeout=5s}', '7cb30c4b7c9c26d5fd8364128c96f468'),
	('check_insert', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'aedd51d69d6aa1b1918855994aff0c23'),
	('check_update', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '75c5a200693d1d6fba2b73b06a43e8b7'),
	('check_delete', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '950eb5c2f7cea4ac1f4ea18cc7019b9d'),
	('check_row', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '5457e35ca6c359285e2607e25ee149f4'),
	('refuse_truncate', '', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '1a92ad27a4a8f6654f32d9d0fb9e61c5'),
	('tree', 'tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'e15f261a490503dc005c5a94d653b176'),
	('shape', 'tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'a943db7088cdbff3073d9328224b58bf'),
	('check_expression', 'probe regclass, tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', '78facc8cd29e88512dd95e20b1e94b68'),
	('protect', 'tbl regclass, resource text', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'ee6dd4a0f000e87444b79e2ca9c53899'),
	('unprotect', 'tbl regclass', false, false, false, '{"search_path=pg_catalog, pg_temp"}', 'cbaf82bdef9110557e3113820cfb4fee'),
	('set_mark', 'resource text, token bigint, reason text', true, false, false, '{"search_path=pg_catalog, pg_temp"}', '6926ab9121062ec5840b934392d90da2'),
	('guard_ddl', '', false, false, true, '{"search_path=pg_catalog, pg_temp"}', '9a5a34d48693e0018407f168d9a58329'),
	('guard_drop', '', false, false, true, '{"search_path=pg_catalog, pg_temp"}', 'bbceeb1d3b5b2db6c6343ef90a6ea3ed')
`
