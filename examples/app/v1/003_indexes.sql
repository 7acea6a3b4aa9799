CREATE INDEX orders_customer_idx ON orders (customer_id);
