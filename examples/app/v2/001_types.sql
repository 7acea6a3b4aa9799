-- Order lifecycle. v2: orders can be cancelled.
CREATE TYPE order_status AS ENUM ('pending', 'paid', 'shipped', 'cancelled');
