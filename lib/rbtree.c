/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Red-black trees, and the sector-sorted request trees schedulers keep.
 *
 * The textbook algorithm: a node is red or black; the root is black; a red
 * node has no red child; every path from a node down to an empty subtree
 * passes the same number of black nodes.  Insertion recolours up the tree
 * and ends with at most two rotations; erasure replaces the node by its
 * successor when it has two children and repairs a missing black with at
 * most three rotations.  The caller finds the place and links the node
 * (rq_rb_link_node()); this file only rebalances.
 *
 * A node's parent pointer and colour share parent_color: nodes are at least
 * 4-byte aligned, so bit 0 holds the colour (0 red, 1 black).  A node just
 * linked with rq_rb_link_node() is therefore red, as insertion wants.
 *
 * What may run at the same time: nothing.  A tree is a plain data
 * structure; its owner (a scheduler, under its own lock) serialises every
 * operation on it, lookups included.
 */
#include <stddef.h>

#include <librequest/elevator.h>

#include "internal/compiler.h"

#define RB_RED 0u
#define RB_BLACK 1u
#define RB_COLOR_MASK ((uintptr_t)1)

static inline struct rq_rb_node *rb_parent(const struct rq_rb_node *n)
{
	return (struct rq_rb_node *)(n->parent_color & ~(uintptr_t)3);
}

static inline unsigned rb_color(const struct rq_rb_node *n)
{
	return (unsigned)(n->parent_color & RB_COLOR_MASK);
}

/* An empty subtree counts as black. */
static inline bool rb_is_black(const struct rq_rb_node *n)
{
	return !n || rb_color(n) == RB_BLACK;
}

static inline bool rb_is_red(const struct rq_rb_node *n)
{
	return !rb_is_black(n);
}

static inline void rb_set_parent(struct rq_rb_node *n, struct rq_rb_node *p)
{
	n->parent_color = (uintptr_t)p | (n->parent_color & RB_COLOR_MASK);
}

static inline void rb_set_color(struct rq_rb_node *n, unsigned color)
{
	n->parent_color = (n->parent_color & ~RB_COLOR_MASK) | color;
}

/* Make @new take @old's place under @old's parent (or as the root). */
static void rb_replace_child(struct rq_rb_root *root, struct rq_rb_node *parent,
			     struct rq_rb_node *old, struct rq_rb_node *new)
{
	if (!parent)
		root->node = new;
	else if (parent->left == old)
		parent->left = new;
	else
		parent->right = new;
}

/*
 *     x                y
 *    / \              / \
 *   a   y     ->     x   c
 *      / \          / \
 *     b   c        a   b
 */
static void rb_rotate_left(struct rq_rb_root *root, struct rq_rb_node *x)
{
	struct rq_rb_node *y = x->right;
	struct rq_rb_node *p = rb_parent(x);

	x->right = y->left;
	if (y->left)
		rb_set_parent(y->left, x);
	rb_set_parent(y, p);
	rb_replace_child(root, p, x, y);
	y->left = x;
	rb_set_parent(x, y);
}

/* The mirror image of rb_rotate_left(). */
static void rb_rotate_right(struct rq_rb_root *root, struct rq_rb_node *x)
{
	struct rq_rb_node *y = x->left;
	struct rq_rb_node *p = rb_parent(x);

	x->left = y->right;
	if (y->right)
		rb_set_parent(y->right, x);
	rb_set_parent(y, p);
	rb_replace_child(root, p, x, y);
	y->right = x;
	rb_set_parent(x, y);
}

/**
 * rq_rb_insert_color() - rebalance after linking @node.
 * @node: a node just placed with rq_rb_link_node() (red).
 * @root: its tree.
 *
 * Context: the tree's owner; O(log n), at most two rotations.
 */
RQ_EXPORT void rq_rb_insert_color(struct rq_rb_node *node, struct rq_rb_root *root)
{
	struct rq_rb_node *z = node;

	rb_set_color(z, RB_RED);
	for (;;) {
		struct rq_rb_node *parent = rb_parent(z);
		struct rq_rb_node *gp, *uncle;

		if (!parent || rb_is_black(parent))
			break;
		/* A red parent is not the root, so the grandparent exists. */
		gp = rb_parent(parent);
		if (parent == gp->left) {
			uncle = gp->right;
			if (rb_is_red(uncle)) {
				/* Red uncle: push the blackness down from gp. */
				rb_set_color(parent, RB_BLACK);
				rb_set_color(uncle, RB_BLACK);
				rb_set_color(gp, RB_RED);
				z = gp;
				continue;
			}
			if (z == parent->right) {
				/* Inner grandchild: make it the outer one. */
				rb_rotate_left(root, parent);
				z = parent;
				parent = rb_parent(z);
			}
			rb_set_color(parent, RB_BLACK);
			rb_set_color(gp, RB_RED);
			rb_rotate_right(root, gp);
		} else {
			uncle = gp->left;
			if (rb_is_red(uncle)) {
				rb_set_color(parent, RB_BLACK);
				rb_set_color(uncle, RB_BLACK);
				rb_set_color(gp, RB_RED);
				z = gp;
				continue;
			}
			if (z == parent->left) {
				rb_rotate_right(root, parent);
				z = parent;
				parent = rb_parent(z);
			}
			rb_set_color(parent, RB_BLACK);
			rb_set_color(gp, RB_RED);
			rb_rotate_left(root, gp);
		}
		break;
	}
	rb_set_color(root->node, RB_BLACK);
}

/*
 * One black is missing on every path through @x (possibly empty), the
 * child of @parent: borrow it from the sibling's side.
 */
static void rb_erase_fixup(struct rq_rb_root *root, struct rq_rb_node *x,
			   struct rq_rb_node *parent)
{
	while (x != root->node && rb_is_black(x)) {
		struct rq_rb_node *w;

		if (x == parent->left) {
			/* The sibling exists: its side has at least one black more. */
			w = parent->right;
			if (rb_is_red(w)) {
				rb_set_color(w, RB_BLACK);
				rb_set_color(parent, RB_RED);
				rb_rotate_left(root, parent);
				w = parent->right;
			}
			if (rb_is_black(w->left) && rb_is_black(w->right)) {
				rb_set_color(w, RB_RED);
				x = parent;
				parent = rb_parent(x);
				continue;
			}
			if (rb_is_black(w->right)) {
				rb_set_color(w->left, RB_BLACK);
				rb_set_color(w, RB_RED);
				rb_rotate_right(root, w);
				w = parent->right;
			}
			rb_set_color(w, rb_color(parent));
			rb_set_color(parent, RB_BLACK);
			rb_set_color(w->right, RB_BLACK);
			rb_rotate_left(root, parent);
		} else {
			w = parent->left;
			if (rb_is_red(w)) {
				rb_set_color(w, RB_BLACK);
				rb_set_color(parent, RB_RED);
				rb_rotate_right(root, parent);
				w = parent->left;
			}
			if (rb_is_black(w->left) && rb_is_black(w->right)) {
				rb_set_color(w, RB_RED);
				x = parent;
				parent = rb_parent(x);
				continue;
			}
			if (rb_is_black(w->left)) {
				rb_set_color(w->right, RB_BLACK);
				rb_set_color(w, RB_RED);
				rb_rotate_left(root, w);
				w = parent->left;
			}
			rb_set_color(w, rb_color(parent));
			rb_set_color(parent, RB_BLACK);
			rb_set_color(w->left, RB_BLACK);
			rb_rotate_right(root, parent);
		}
		x = root->node;
		break;
	}
	if (x)
		rb_set_color(x, RB_BLACK);
}

/**
 * rq_rb_erase() - remove @node from @root and rebalance.
 * @node: a node in @root.
 * @root: the tree.
 *
 * @node's own fields are left stale; rq_rb_clear_node() marks it unlinked.
 * Context: the tree's owner; O(log n), at most three rotations.
 */
RQ_EXPORT void rq_rb_erase(struct rq_rb_node *node, struct rq_rb_root *root)
{
	struct rq_rb_node *x, *x_parent;
	unsigned removed_color;

	if (!node->left || !node->right) {
		/* At most one child: it takes the node's place. */
		x = node->left ? node->left : node->right;
		x_parent = rb_parent(node);
		removed_color = rb_color(node);
		rb_replace_child(root, x_parent, node, x);
		if (x)
			rb_set_parent(x, x_parent);
	} else {
		/* Two children: the successor y (no left child) takes its place. */
		struct rq_rb_node *y = node->right;

		while (y->left)
			y = y->left;
		removed_color = rb_color(y);
		x = y->right;
		if (rb_parent(y) == node) {
			x_parent = y;
		} else {
			x_parent = rb_parent(y);
			x_parent->left = x;
			if (x)
				rb_set_parent(x, x_parent);
			y->right = node->right;
			rb_set_parent(y->right, y);
		}
		rb_replace_child(root, rb_parent(node), node, y);
		y->left = node->left;
		rb_set_parent(y->left, y);
		/* y inherits node's parent and colour: only y's old spot changed. */
		y->parent_color = node->parent_color;
	}
	if (removed_color == RB_BLACK)
		rb_erase_fixup(root, x, x_parent);
}

/**
 * rq_rb_first() - the leftmost (smallest) node.
 * @root: the tree.
 * Context: the tree's owner.
 * Return: the node, NULL for an empty tree.
 */
RQ_EXPORT struct rq_rb_node *rq_rb_first(const struct rq_rb_root *root)
{
	struct rq_rb_node *n = root->node;

	if (!n)
		return NULL;
	while (n->left)
		n = n->left;
	return n;
}

/**
 * rq_rb_last() - the rightmost (largest) node.
 * @root: the tree.
 * Context: the tree's owner.
 * Return: the node, NULL for an empty tree.
 */
RQ_EXPORT struct rq_rb_node *rq_rb_last(const struct rq_rb_root *root)
{
	struct rq_rb_node *n = root->node;

	if (!n)
		return NULL;
	while (n->right)
		n = n->right;
	return n;
}

/**
 * rq_rb_next() - the in-order successor.
 * @node: a node in a tree.
 * Context: the tree's owner.
 * Return: the next node, NULL after the last or for an unlinked node.
 */
RQ_EXPORT struct rq_rb_node *rq_rb_next(const struct rq_rb_node *node)
{
	struct rq_rb_node *n, *p;

	if (rq_rb_empty_node(node))
		return NULL;
	if (node->right) {
		n = node->right;
		while (n->left)
			n = n->left;
		return n;
	}
	/* Climb while we come from a right child. */
	n = (struct rq_rb_node *)node;
	while ((p = rb_parent(n)) && n == p->right)
		n = p;
	return p;
}

/**
 * rq_rb_prev() - the in-order predecessor.
 * @node: a node in a tree.
 * Context: the tree's owner.
 * Return: the previous node, NULL before the first or for an unlinked node.
 */
RQ_EXPORT struct rq_rb_node *rq_rb_prev(const struct rq_rb_node *node)
{
	struct rq_rb_node *n, *p;

	if (rq_rb_empty_node(node))
		return NULL;
	if (node->left) {
		n = node->left;
		while (n->right)
			n = n->right;
		return n;
	}
	n = (struct rq_rb_node *)node;
	while ((p = rb_parent(n)) && n == p->left)
		n = p;
	return p;
}

/* ------------------------------------------- sector-sorted request trees */

static inline struct rq_request *rb_entry_rq(struct rq_rb_node *n)
{
	return n ? RQ_CONTAINER_OF(n, struct rq_request, rb_node) : NULL;
}

/**
 * rq_sched_rb_add() - insert @rq into @root sorted by rq->sector.
 * @root: the tree.
 * @rq: a request in no tree; requests with equal sectors go after the ones
 *	already there.
 * Context: the scheduler's lock.
 */
RQ_EXPORT void rq_sched_rb_add(struct rq_rb_root *root, struct rq_request *rq)
{
	struct rq_rb_node **link = &root->node;
	struct rq_rb_node *parent = NULL;

	while (*link) {
		struct rq_request *cur = rb_entry_rq(*link);

		parent = *link;
		if (rq->sector < cur->sector)
			link = &parent->left;
		else
			link = &parent->right;
	}
	rq_rb_link_node(&rq->rb_node, parent, link);
	rq_rb_insert_color(&rq->rb_node, root);
}

/**
 * rq_sched_rb_del() - remove @rq from @root and mark it in no tree.
 * @root: the tree @rq is in.
 * @rq: the request.
 * Context: the scheduler's lock.
 */
RQ_EXPORT void rq_sched_rb_del(struct rq_rb_root *root, struct rq_request *rq)
{
	rq_rb_erase(&rq->rb_node, root);
	rq_rb_clear_node(&rq->rb_node);
}

/**
 * rq_sched_rb_find() - a request starting at @sector.
 * @root: the tree.
 * @sector: the start sector.
 * Context: the scheduler's lock.
 * Return: the first request of @root in sorted order whose sector is
 * @sector, NULL if none.  When several start there, that is the one added
 * first (rq_sched_rb_add() puts equal sectors after each other), whatever
 * the tree's shape; the kernel takes the first met on the way down.
 */
RQ_EXPORT struct rq_request *rq_sched_rb_find(struct rq_rb_root *root, uint64_t sector)
{
	struct rq_rb_node *n = root->node;
	struct rq_request *found = NULL;

	while (n) {
		struct rq_request *rq = rb_entry_rq(n);

		if (sector < rq->sector) {
			n = n->left;
		} else if (sector > rq->sector) {
			n = n->right;
		} else {
			found = rq; /* an earlier one may lie to the left */
			n = n->left;
		}
	}
	return found;
}

/**
 * rq_sched_rb_first() - the request with the lowest sector.
 * @root: the tree.
 * Context: the scheduler's lock.
 * Return: the request, NULL for an empty tree.
 */
RQ_EXPORT struct rq_request *rq_sched_rb_first(struct rq_rb_root *root)
{
	return rb_entry_rq(rq_rb_first(root));
}

/**
 * rq_sched_rb_former() - the request before @rq in its tree.
 * @rq: a request in a tree.
 * Context: the scheduler's lock.
 * Return: the request, NULL if @rq is the first (or in no tree).
 */
RQ_EXPORT struct rq_request *rq_sched_rb_former(struct rq_request *rq)
{
	return rb_entry_rq(rq_rb_prev(&rq->rb_node));
}

/**
 * rq_sched_rb_latter() - the request after @rq in its tree.
 * @rq: a request in a tree.
 * Context: the scheduler's lock.
 * Return: the request, NULL if @rq is the last (or in no tree).
 */
RQ_EXPORT struct rq_request *rq_sched_rb_latter(struct rq_request *rq)
{
	return rb_entry_rq(rq_rb_next(&rq->rb_node));
}
