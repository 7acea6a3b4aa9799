-- A little data, so the plan's hazards are about something.
INSERT INTO customers (email, name, legacy_code) VALUES
    ('ada@example.com', 'Ada', 'A-1'),
    ('grace@example.com', 'Grace', NULL);
INSERT INTO products (sku, name, price_cents) VALUES ('MUG', 'Mug', 1200), ('TEE', 'T-shirt', 2500);
INSERT INTO orders (customer_id, status) VALUES (1, 'paid'), (2, 'pending');
INSERT INTO order_items VALUES (1, 1, 2), (2, 2, 1);
