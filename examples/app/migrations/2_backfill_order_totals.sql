-- Data, which a declared schema cannot say: the totals of the orders placed
-- so far. It runs in a transaction of its own, with its history row.
INSERT INTO reporting.order_totals (order_id, customer_id, total_cents)
SELECT o.id, o.customer_id, sum(i.quantity * p.price_cents)
FROM public.orders o
JOIN public.order_items i ON i.order_id = o.id
JOIN public.products p ON p.id = i.product_id
GROUP BY o.id, o.customer_id;
