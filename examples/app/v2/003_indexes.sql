CREATE INDEX orders_customer_idx ON orders (customer_id);
-- v2: the fulfilment queue reads open orders oldest first.
CREATE INDEX orders_status_created_idx ON orders (status, created_at);
