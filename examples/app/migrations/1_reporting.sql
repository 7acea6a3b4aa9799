-- A reporting schema the PtahSchema beside this migration does not manage
-- (its spec.schemas is [public]): these hand-written files own it.
CREATE SCHEMA reporting;

CREATE TABLE reporting.order_totals (
    order_id    bigint PRIMARY KEY,
    customer_id bigint NOT NULL,
    total_cents bigint NOT NULL,
    computed_at timestamptz NOT NULL DEFAULT now()
);
