-- The table of examples/paused-holder, as its administrator creates it
-- once, in the application's database, before protecting it (a protected
-- table refuses unfenced writes, the administrator's too):
--
--   psql "$ADMIN_DSN" -v app=APP_ROLE -v owner=OWNER_ROLE -f setup.sql
--   fencegate protect paused_holder_accounts --resource "'account:' || id" --db "$ADMIN_DSN"
--
-- APP_ROLE is the application role schema fencegate was installed for
-- (fencegate schema install --grant APP_ROLE). It gets the rows and
-- nothing more: no ownership, no TRIGGER, no TRUNCATE. OWNER_ROLE is the
-- NOLOGIN role that owns schema fencegate (fencegate schema install
-- --owner, fencegate_owner by default): it owns the table too, so that no
-- role that can log in could drop or disable the checks.
CREATE TABLE paused_holder_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO paused_holder_accounts VALUES (1, 100);
ALTER TABLE paused_holder_accounts OWNER TO :"owner";
GRANT SELECT, INSERT, UPDATE, DELETE ON paused_holder_accounts TO :"app";
