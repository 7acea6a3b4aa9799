-- ptah:no-transaction
-- Built without blocking writes to the table, which PostgreSQL does only
-- outside a transaction: this file runs statement by statement.
CREATE INDEX CONCURRENTLY order_totals_customer ON reporting.order_totals (customer_id);
