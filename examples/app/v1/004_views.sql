CREATE VIEW customer_order_totals AS
SELECT c.id AS customer_id,
       c.email,
       count(o.id) AS orders
FROM customers c
LEFT JOIN orders o ON o.customer_id = c.id
GROUP BY c.id, c.email;
